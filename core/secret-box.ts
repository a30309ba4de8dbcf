import { createCipheriv, createDecipheriv, createSecretKey, randomBytes, type KeyObject } from 'node:crypto';

/** AES-256-GCM keys by id: `currentKeyId` seals, every key in `keys` (32 bytes each) opens. */
export interface SecretKeys {
  currentKeyId: string;
  keys: ReadonlyMap<string, Buffer>;
}

/** Thrown when a sealed secret cannot be opened: unknown key id, wrong key, tampering or a different row. */
export class SecretBoxError extends Error {
  readonly code = 'SECRET_UNREADABLE';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'SecretBoxError';
  }
}

const ALGORITHM = 'aes-256-gcm';
const KEY_BYTES = 32;
// 96-bit random IVs: NIST SP 800-38D caps one key at 2^32 such messages, far beyond our secret writes.
const IV_BYTES = 12;
const TAG_BYTES = 16;

/**
 * Each key's KeyObject, made once: on Node 24 a Buffer key costs a caught exception in every cipher's KeyObject check
 * (about 20 µs, more than the decryption), and subscription reads open a secret per row.
 */
const keyObjects = new WeakMap<Buffer, KeyObject>();
function keyObject(key: Buffer): KeyObject {
  let made = keyObjects.get(key);
  if (!made) keyObjects.set(key, (made = createSecretKey(key)));
  return made;
}

/** Seals UTF-8 plaintext: returns { keyId, sealed } where sealed = 12-byte random IV || ciphertext || 16-byte tag. */
export function seal(keys: SecretKeys, plaintext: string, associatedData: string): { keyId: string; sealed: Buffer } {
  const keyId = keys.currentKeyId;
  const key = keys.keys.get(keyId);
  // A missing or short current key is a configuration bug, not an unreadable secret.
  if (!key) throw new Error(`secret key "${keyId}" is not configured`);
  if (key.length !== KEY_BYTES) throw new Error(`secret key "${keyId}" must be ${KEY_BYTES} bytes`);
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv(ALGORITHM, keyObject(key), iv, { authTagLength: TAG_BYTES });
  // The associated data binds the ciphertext to its row, so it cannot be copied into another one.
  cipher.setAAD(Buffer.from(associatedData, 'utf8'));
  const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return { keyId, sealed: Buffer.concat([iv, ciphertext, cipher.getAuthTag()]) };
}

/** Opens; throws SecretBoxError (class with stable `code` = 'SECRET_UNREADABLE') if the key id is unknown or the tag fails. */
export function open(keys: SecretKeys, keyId: string, sealed: Buffer, associatedData: string): string {
  const key = keys.keys.get(keyId);
  if (!key) throw new SecretBoxError(`secret sealed with unknown key "${keyId}"`);
  if (sealed.length < IV_BYTES + TAG_BYTES) throw new SecretBoxError('sealed secret is truncated');
  const iv = sealed.subarray(0, IV_BYTES);
  const ciphertext = sealed.subarray(IV_BYTES, sealed.length - TAG_BYTES);
  const tag = sealed.subarray(sealed.length - TAG_BYTES);
  try {
    const decipher = createDecipheriv(ALGORITHM, keyObject(key), iv, { authTagLength: TAG_BYTES });
    decipher.setAAD(Buffer.from(associatedData, 'utf8'));
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(ciphertext), decipher.final()]).toString('utf8');
  } catch (cause) {
    throw new SecretBoxError(`secret sealed with key "${keyId}" failed authentication`, { cause });
  }
}
