import { randomBytes } from 'node:crypto';
import { describe, it, expect } from 'vitest';
import { open, seal, SecretBoxError, type SecretKeys } from './secret-box.ts';

const k1 = randomBytes(32);
const k2 = randomBytes(32);
const keysV1: SecretKeys = { currentKeyId: 'k1', keys: new Map([['k1', k1]]) };
const row = 'tenant-a/sub-1';

function expectUnreadable(fn: () => unknown): void {
  let thrown: unknown;
  try {
    fn();
  } catch (error) {
    thrown = error;
  }
  expect(thrown).toBeInstanceOf(SecretBoxError);
  expect(thrown).toMatchObject({ code: 'SECRET_UNREADABLE', name: 'SecretBoxError' });
}

describe('secret box', () => {
  it.each([
    ['empty', ''],
    ['ascii', 'hmac-secret-value'],
    ['json', JSON.stringify({ hmacSecret: 'c2VjcmV0', apiKey: { headerName: 'X-Api-Key', value: 'k' } })],
    ['unicode', 'clé secrète 🔑 秘密'],
    ['large', 'x'.repeat(100_000)],
  ])('round-trips %s plaintext', (_name, plaintext) => {
    const { keyId, sealed } = seal(keysV1, plaintext, row);
    expect(keyId).toBe('k1');
    expect(sealed.length).toBe(12 + Buffer.byteLength(plaintext) + 16);
    expect(open(keysV1, keyId, sealed, row)).toBe(plaintext);
  });

  it('uses a fresh IV for every seal', () => {
    const a = seal(keysV1, 'same', row).sealed;
    const b = seal(keysV1, 'same', row).sealed;
    expect(a.subarray(0, 12).equals(b.subarray(0, 12))).toBe(false);
    expect(a.equals(b)).toBe(false);
  });

  it('does not contain the plaintext in the sealed bytes', () => {
    const plaintext = 'super-secret-hmac-key-0123456789';
    const { sealed } = seal(keysV1, plaintext, row);
    expect(sealed.includes(Buffer.from(plaintext))).toBe(false);
    expect(sealed.toString('latin1')).not.toContain('super-secret');
  });

  it('fails with SECRET_UNREADABLE when any byte is flipped (IV, ciphertext or tag)', () => {
    const { keyId, sealed } = seal(keysV1, 'tamper me', row);
    for (const index of [0, 11, 12, 15, sealed.length - 16, sealed.length - 1]) {
      const tampered = Buffer.from(sealed);
      tampered[index] = tampered[index]! ^ 0x01;
      expectUnreadable(() => open(keysV1, keyId, tampered, row));
    }
  });

  it.each([
    ['truncated', (sealed: Buffer) => sealed.subarray(0, 27)],
    ['empty', () => Buffer.alloc(0)],
    ['tag removed', (sealed: Buffer) => sealed.subarray(0, sealed.length - 16)],
    ['extended', (sealed: Buffer) => Buffer.concat([sealed, Buffer.from([0])])],
  ])('fails with SECRET_UNREADABLE when %s', (_name, mangle) => {
    const { keyId, sealed } = seal(keysV1, 'payload', row);
    expectUnreadable(() => open(keysV1, keyId, mangle(sealed), row));
  });

  it.each(['tenant-b/sub-1', 'tenant-a/sub-2', '', 'tenant-a/sub-1 '])(
    'fails with SECRET_UNREADABLE under other associated data %j',
    (otherRow) => {
      const { keyId, sealed } = seal(keysV1, 'bound to its row', row);
      expectUnreadable(() => open(keysV1, keyId, sealed, otherRow));
    },
  );

  it('fails with SECRET_UNREADABLE for an unknown key id', () => {
    const { sealed } = seal(keysV1, 'payload', row);
    expectUnreadable(() => open(keysV1, 'k9', sealed, row));
  });

  it('fails with SECRET_UNREADABLE when the key id names a different key', () => {
    const { sealed } = seal(keysV1, 'payload', row);
    const swapped: SecretKeys = { currentKeyId: 'k1', keys: new Map([['k1', k2]]) };
    expectUnreadable(() => open(swapped, 'k1', sealed, row));
  });

  it('opens old ciphertexts after rotation and seals new ones with the current key', () => {
    const old = seal(keysV1, 'sealed before rotation', row);
    const rotated: SecretKeys = {
      currentKeyId: 'k2',
      keys: new Map([
        ['k2', k2],
        ['k1', k1],
      ]),
    };
    expect(open(rotated, old.keyId, old.sealed, row)).toBe('sealed before rotation');

    const fresh = seal(rotated, 'sealed after rotation', row);
    expect(fresh.keyId).toBe('k2');
    expect(open(rotated, fresh.keyId, fresh.sealed, row)).toBe('sealed after rotation');
    // Once k1 is dropped, its ciphertexts are unreadable.
    expectUnreadable(() => open({ currentKeyId: 'k2', keys: new Map([['k2', k2]]) }, old.keyId, old.sealed, row));
  });

  it('refuses to seal with a missing or wrong-length current key (a configuration error)', () => {
    expect(() => seal({ currentKeyId: 'nope', keys: new Map([['k1', k1]]) }, 'x', row)).toThrow('"nope"');
    expect(() => seal({ currentKeyId: 'short', keys: new Map([['short', randomBytes(16)]]) }, 'x', row)).toThrow(
      '32 bytes',
    );
  });
});
