import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { launchCommand } from './process.ts';

const run = promisify(execFile);

describe('server launch command', () => {
  it('runs the JVM itself when the launch asks for no timer slack', () => {
    expect(launchCommand('/usr/bin/java', { args: ['-Xmx1g', 'Main'], cwd: '/tmp' })).toEqual({
      command: '/usr/bin/java',
      args: ['-Xmx1g', 'Main'],
    });
  });

  it('on Linux, gives the program it becomes the timer slack asked for', async () => {
    // `cat` stands in for the JVM: it reads the slack of the process the shell became, and that process's name.
    const launch = launchCommand('/bin/cat', {
      args: ['/proc/self/timerslack_ns', '/proc/self/comm'],
      cwd: '/tmp',
      timerSlackNs: 250_000,
    });
    expect(launch.command).toBe('/bin/sh');
    const { stdout } = await run(launch.command, launch.args, { cwd: '/tmp' });
    expect(stdout).toBe('250000\ncat\n');
  });

  it('passes the arguments through the shell untouched: no splitting at spaces, no glob expansion', async () => {
    // A class path such as `lib/*` must reach the JVM as written.
    const launch = launchCommand('/usr/bin/printf', {
      args: ['<%s>', 'a b', '/tmp/*', '$HOME'],
      cwd: '/tmp',
      timerSlackNs: 250_000,
    });
    const { stdout } = await run(launch.command, launch.args, { cwd: '/tmp' });
    expect(stdout).toBe('<a b></tmp/*><$HOME>');
  });
});
