/**
 * The restart policy of `npm start`: a service process that exits without being asked to is started again after a
 * delay that doubles from 1 s to 30 s, and drops back to 1 s once a process has run stably for a minute. Five restarts
 * within two minutes are reported once as a crash loop; retries go on at the capped delay. stop() ends it all: no
 * restart is made once it is called.
 */

/** How a process ended: an exit code, or the signal that killed it. */
export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** One running incarnation of the supervised process. */
export interface SupervisedChild {
  /** The operating system's process id, when there is one. */
  pid?: number;
  /** Resolves once the process has exited, for whatever reason. */
  exited: Promise<Exit>;
  /** Asks the process to stop and resolves when it has exited. */
  stop(): Promise<void>;
}

/** Time as the supervisor sees it; tests pass a fake one. */
export interface Clock {
  now(): number;
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface RestartPolicy {
  initialDelayMs: number;
  maxDelayMs: number;
  /** A process that ran this long before exiting resets the delay to initialDelayMs. */
  stableAfterMs: number;
  /** This many restarts within crashLoopWindowMs is a crash loop. */
  crashLoopRestarts: number;
  crashLoopWindowMs: number;
}

export const defaultPolicy: RestartPolicy = {
  initialDelayMs: 1_000,
  maxDelayMs: 30_000,
  stableAfterMs: 60_000,
  crashLoopRestarts: 5,
  crashLoopWindowMs: 120_000,
};

export interface SupervisorOptions {
  name: string;
  /** Starts a new incarnation of the process. */
  spawn: () => SupervisedChild;
  /** One human-readable line per restart or crash loop. */
  report: (line: string) => void;
  policy?: Partial<RestartPolicy>;
  clock?: Clock;
}

const realClock: Clock = {
  now: () => Date.now(),
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

export const describeExit = ({ code, signal }: Exit): string =>
  signal !== null ? `killed by ${signal}` : `exit code ${code ?? 'unknown'}`;

const seconds = (ms: number): string => `${Number((ms / 1000).toFixed(1))} s`;

/** Keeps one process running under the restart policy until stop(). */
export class Supervisor {
  private readonly policy: RestartPolicy;
  private readonly clock: Clock;
  private child: SupervisedChild | undefined;
  private startedAt = 0;
  private nextDelayMs: number;
  /** When each restart of the current episode happened, for crash-loop detection. */
  private restartTimes: number[] = [];
  private inCrashLoop = false;
  private timer: unknown;
  private stopped = false;
  /** Restarts made so far (not counting the first start). */
  restarts = 0;

  constructor(private readonly options: SupervisorOptions) {
    this.policy = { ...defaultPolicy, ...options.policy };
    this.clock = options.clock ?? realClock;
    this.nextDelayMs = this.policy.initialDelayMs;
  }

  /** The current incarnation, if one is running. */
  get current(): SupervisedChild | undefined {
    return this.child;
  }

  start(): void {
    if (this.stopped) return;
    const child = this.options.spawn();
    this.child = child;
    this.startedAt = this.clock.now();
    void child.exited.then((exit) => this.onExit(child, exit));
  }

  /** Stops the current process (if any) and cancels a pending restart. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    await this.child?.stop();
  }

  private onExit(child: SupervisedChild, exit: Exit): void {
    if (this.child === child) this.child = undefined;
    if (this.stopped) return;
    const now = this.clock.now();
    if (now - this.startedAt >= this.policy.stableAfterMs) {
      // It ran stably: this exit starts a new episode.
      this.nextDelayMs = this.policy.initialDelayMs;
      this.restartTimes = [];
      this.inCrashLoop = false;
    }
    this.restartTimes = [...this.restartTimes.filter((at) => now - at < this.policy.crashLoopWindowMs), now];
    const delay = this.nextDelayMs;
    this.nextDelayMs = Math.min(delay * 2, this.policy.maxDelayMs);
    this.restarts += 1;
    const { name } = this.options;
    this.options.report(
      `${name} exited unexpectedly (${describeExit(exit)}) after ${seconds(now - this.startedAt)}; ` +
        `restart ${this.restarts} in ${seconds(delay)}`,
    );
    if (!this.inCrashLoop && this.restartTimes.length >= this.policy.crashLoopRestarts) {
      this.inCrashLoop = true;
      this.nextDelayMs = this.policy.maxDelayMs;
      this.options.report(
        `${name} is in a crash loop: ${this.restartTimes.length} restarts within ` +
          `${seconds(this.policy.crashLoopWindowMs)}; retrying every ${seconds(this.policy.maxDelayMs)} (see its log)`,
      );
    }
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      this.start();
    }, delay);
  }
}
