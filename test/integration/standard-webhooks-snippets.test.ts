// The README's Standard Webhooks snippets (sdk/snippets/standard.mjs and standard.py, shown above their command line),
// run as programs with the official libraries (npm `standardwebhooks`, and PyPI's in the venv of
// test/support/python-verifier.ts): they accept a delivery signed as the dispatcher signs it, with either secret
// during a rotation, and refuse a tampered body, another secret and a capture replayed past the tolerance.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { generateStandardSecret, standardHeaders } from '../../core/standard-webhooks.ts';
import { repoRoot } from '../../infra/processes.ts';
import { standardWebhooksPython } from '../support/python-verifier.ts';

const body = Buffer.from(
  '{"eventId":"0b7c6f1e-2c4d-4e5f-8a9b-1c2d3e4f5a6b","eventType":"purchaseOrder.validated",' +
    '"occurredAt":"2026-11-27T09:17:03.112Z","entityId":"6f1d","reference":"PO-000042",' +
    '"resourceUrl":"/CorePurchase/REST/PurchaseOrders/6f1d","subscriptionId":"a1b2",' +
    '"payload":{"supplierName":"Société Générale","totalAmount":"12.500"},"payloadOmitted":false}',
);
const eventId = '0b7c6f1e-2c4d-4e5f-8a9b-1c2d3e4f5a6b';

/** The part of a snippet shown in the README: everything above its command line for the tests. */
function shownPart(file: string): string {
  const text = readFileSync(path.join(repoRoot, 'sdk', 'snippets', file), 'utf8');
  const cli = text.search(/^(#|\/\/) A command line for this repository's tests/m);
  expect(cli).toBeGreaterThan(0);
  return text.slice(0, cli).trimEnd();
}

const programs = [
  { language: 'Node', file: 'standard.mjs', fence: 'js', binary: async () => process.execPath },
  { language: 'Python', file: 'standard.py', fence: 'python', binary: standardWebhooksPython },
];

for (const program of programs) {
  describe(`${program.language} Standard Webhooks snippet`, () => {
    let binary: string;
    beforeAll(async () => {
      binary = await program.binary();
    }, 180_000);

    const run = (secret: string, headers: Record<string, string>, input: Buffer) => {
      const result = spawnSync(
        binary,
        [
          path.join('sdk', 'snippets', program.file),
          headers['webhook-id']!,
          headers['webhook-timestamp']!,
          headers['webhook-signature']!,
        ],
        { cwd: repoRoot, input, encoding: 'utf8', env: { PATH: process.env.PATH, WEBHOOK_SECRET: secret } },
      );
      if (result.error) throw result.error;
      return { status: result.status, output: result.stdout.trim() };
    };
    const now = () => Math.floor(Date.now() / 1000);

    it('accepts a delivery signed as the dispatcher signs it, with either secret during a rotation', () => {
      const previous = generateStandardSecret();
      const current = generateStandardSecret();
      const headers = standardHeaders([current, previous], eventId, now(), body);
      const verified = { status: 0, output: `verified purchaseOrder.validated ${eventId}` };
      expect(run(current, headers, body)).toEqual(verified);
      expect(run(previous, headers, body)).toEqual(verified);
    });

    it('refuses a tampered body, another secret, and a capture replayed past the tolerance', () => {
      const secret = generateStandardSecret();
      const tampered = Buffer.from(body.toString('utf8').replace('12.500', '13.500'));
      const signed = standardHeaders([secret], eventId, now(), body);
      const old = standardHeaders([secret], eventId, now() - 600, body);
      const outcomes = [
        run(secret, signed, tampered),
        run(generateStandardSecret(), signed, body),
        run(secret, old, body),
      ];
      expect(outcomes.map((outcome) => outcome.status)).toEqual([1, 1, 1]);
      expect(outcomes.map((outcome) => outcome.output)).toEqual([
        'refused: No matching signature found',
        'refused: No matching signature found',
        'refused: Message timestamp too old',
      ]);
    });

    it('is in the README exactly as in the file', () => {
      const readme = readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
      expect(readme).toContain(`\`\`\`${program.fence}\n${shownPart(program.file)}\n\`\`\``);
    });
  });
}
