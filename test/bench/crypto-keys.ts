/**
 * `npx tsx test/bench/crypto-keys.ts [--calls 50000] [--rounds 3]`
 * What one HMAC-SHA256 of a 600-byte body (a delivery's signature) and one AES-256-GCM open (a subscription's secret
 * read) cost in µs by the form of their key: a string, a Buffer, a KeyObject. On Node 24, `isKeyObject` tests a Buffer
 * by a private-field read that throws and is caught, on every call; a string or a KeyObject does not pay it. The last
 * rows are our own functions (core/envelope.ts signBody, core/secret-box.ts open).
 */
import { createDecipheriv, createHmac, createSecretKey, randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { signBody } from '../../core/envelope.ts';
import { open, seal, type SecretKeys } from '../../core/secret-box.ts';

const { values } = parseArgs({
  options: { calls: { type: 'string', default: '50000' }, rounds: { type: 'string', default: '3' } },
});
const calls = Number(values.calls);

const secret = `whsec_${randomBytes(24).toString('base64')}`;
const body = randomBytes(600);
const aesKey = randomBytes(32);
const keys: SecretKeys = { currentKeyId: 'k1', keys: new Map([['k1', aesKey]]) };
const { sealed } = seal(keys, secret, 'row');
const iv = sealed.subarray(0, 12);
const ciphertext = sealed.subarray(12, sealed.length - 16);
const tag = sealed.subarray(sealed.length - 16);
const decrypt = (key: Buffer | ReturnType<typeof createSecretKey>) => {
  const decipher = createDecipheriv('aes-256-gcm', key, iv, { authTagLength: 16 });
  decipher.setAAD(Buffer.from('row'));
  decipher.setAuthTag(tag);
  return Buffer.concat([decipher.update(ciphertext), decipher.final()]);
};

const cases: [string, () => unknown][] = [
  ['hmac, string key', () => createHmac('sha256', secret).update(body).digest('base64')],
  ['hmac, Buffer key', () => createHmac('sha256', Buffer.from(secret, 'utf8')).update(body).digest('base64')],
  [
    'hmac, KeyObject key',
    (
      (key) => () =>
        createHmac('sha256', key).update(body).digest('base64')
    )(createSecretKey(Buffer.from(secret))),
  ],
  ['aes-gcm open, Buffer key', () => decrypt(aesKey)],
  [
    'aes-gcm open, KeyObject key',
    (
      (key) => () =>
        decrypt(key)
    )(createSecretKey(aesKey)),
  ],
  ['signBody (core/envelope.ts)', () => signBody(secret, body)],
  ['open (core/secret-box.ts)', () => open(keys, 'k1', sealed, 'row')],
];

console.log(`Node ${process.version}, ${calls} calls a case, µs per call by round`);
const results = new Map<string, string[]>();
for (let round = 0; round < Number(values.rounds); round += 1) {
  for (const [name, run] of cases) {
    const started = process.hrtime.bigint();
    for (let call = 0; call < calls; call += 1) run();
    const micros = Number(process.hrtime.bigint() - started) / 1_000 / calls;
    results.set(name, [...(results.get(name) ?? []), micros.toFixed(2)]);
  }
}
for (const [name, figures] of results) console.log(`${name.padEnd(30)} ${figures.join('  ')}`);
