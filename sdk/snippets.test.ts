// The verification snippets of the README (Python, Go, plain Node), run as the small command lines they end with: they
// must accept a delivery signed by signWebhook and refuse a tampered one, exactly like the kit.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { signWebhook } from './src/verify.ts';
import { SECRET, envelopeBody, validatedOrder } from './test/fixtures.ts';

const SDK = fileURLToPath(new URL('.', import.meta.url));
const ROOT = join(SDK, '..');

/** The path of an executable on PATH (as `which` finds it), else the first fallback that exists. */
function which(name: string, fallbacks: string[] = []): string | undefined {
  const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  if (found.status === 0 && found.stdout.trim() !== '') return found.stdout.trim();
  return fallbacks.find((path) => existsSync(path));
}

/** Go builds into the repository's git-ignored .local/, never downloads anything (stdlib only) and sends nothing. */
const goEnv = {
  GOCACHE: join(ROOT, '.local', 'go-cache'),
  GOPATH: join(ROOT, '.local', 'gopath'),
  GOTOOLCHAIN: 'local',
  GOPROXY: 'off',
  GOFLAGS: '',
  GOTELEMETRY: 'off',
};

interface Snippet {
  language: string;
  /** The snippet's file under sdk/snippets and the README's fence language. */
  file: string;
  fence: string;
  binary: string | undefined;
  args: string[];
  env?: Record<string, string>;
}

const snippets: Snippet[] = [
  {
    language: 'Python',
    file: 'verify.py',
    fence: 'python',
    binary: which('python3'),
    args: ['sdk/snippets/verify.py'],
  },
  {
    language: 'Go',
    file: 'verify.go',
    fence: 'go',
    binary: which('go', ['/usr/local/go/bin/go']),
    args: ['run', 'sdk/snippets/verify.go'],
    env: goEnv,
  },
  { language: 'Node', file: 'verify.mjs', fence: 'js', binary: process.execPath, args: ['sdk/snippets/verify.mjs'] },
];

const body = envelopeBody(validatedOrder);
const signature = signWebhook(SECRET, body);
const eventId = (JSON.parse(body.toString('utf8')) as { eventId: string }).eventId;

/** The part of a snippet shown in the README: everything above its command line for the tests. */
function shownPart(file: string): string {
  const text = readFileSync(join(SDK, 'snippets', file), 'utf8');
  const cli = text.search(/^(#|\/\/) A command line for this repository's tests/m);
  expect(cli).toBeGreaterThan(0);
  return text.slice(0, cli).trimEnd();
}

for (const snippet of snippets) {
  if (!snippet.binary) {
    console.warn(`sdk/snippets.test.ts: ${snippet.language} is not installed; its snippet is not run here`);
  }

  describe.runIf(snippet.binary !== undefined)(
    snippet.binary ? `${snippet.language} snippet` : `${snippet.language} snippet (not run: no ${snippet.args[0]})`,
    () => {
      const run = (args: string[], input: Buffer, secrets: Record<string, string>) => {
        const result = spawnSync(snippet.binary!, [...snippet.args, ...args], {
          cwd: ROOT,
          input,
          encoding: 'utf8',
          env: { PATH: process.env.PATH, HOME: process.env.HOME, ...snippet.env, ...secrets },
        });
        // stdout only: `go run` adds "exit status 1" on stderr when the program exits with 1.
        if (result.error) throw result.error;
        return { status: result.status, output: result.stdout };
      };

      beforeAll(() => {
        if (snippet.env === goEnv) mkdirSync(goEnv.GOCACHE, { recursive: true });
        // The first `go run` of a fresh clone compiles net/http and friends (15 s here); later ones reuse the cache.
        const first = run([], body, { WEBHOOK_SECRET: SECRET });
        expect(first.output).toBe('refused: missing X-Webhook-Signature header\n');
      }, 180_000);

      it('accepts a delivery signed with the secret, non-ASCII body included', () => {
        expect(run([signature], body, { WEBHOOK_SECRET: SECRET })).toEqual({
          status: 0,
          output: `verified purchaseOrder.validated ${eventId}\n`,
        });
      });

      it('refuses the body with one byte changed', () => {
        const tampered = Buffer.from(body);
        const at = tampered.indexOf('"totalAmount":"12.500"') + '"totalAmount":"1'.length;
        tampered.write('3', at); // 12.500 → 13.500
        expect(run([signature], tampered, { WEBHOOK_SECRET: SECRET })).toEqual({
          status: 1,
          output: 'refused: invalid signature\n',
        });
      });

      it('refuses a signature made with another secret, and a malformed one', () => {
        const wrong = signWebhook('another-secret-0000000', body);
        expect(run([wrong], body, { WEBHOOK_SECRET: SECRET }).status).toBe(1);
        expect(run(['not-base64!'], body, { WEBHOOK_SECRET: SECRET })).toEqual({
          status: 1,
          output: 'refused: invalid signature\n',
        });
      });

      it('accepts with the previous secret during a rotation', () => {
        const secrets = { WEBHOOK_SECRET: 'the-new-secret-0000000', WEBHOOK_PREVIOUS_SECRET: SECRET };
        expect(run([signature], body, secrets).status).toBe(0);
        expect(run([signature], body, { WEBHOOK_SECRET: 'the-new-secret-0000000' }).status).toBe(1);
      });

      it('is in the README exactly as in the file', () => {
        const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
        expect(readme).toContain(`\`\`\`${snippet.fence}\n${shownPart(snippet.file)}\n\`\`\``);
      });
    },
  );
}

it('the kit snippet of the README is sdk/snippets/with-kit.ts, importing the kit by its package name', () => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const file = readFileSync(join(SDK, 'snippets', 'with-kit.ts'), 'utf8').trimEnd();
  expect(file).toContain("from '../src/index.ts'");
  expect(readme).toContain(`\`\`\`ts\n${file.replace("'../src/index.ts'", "'@core-webhooks/receiver-kit'")}\n\`\`\``);
});
