import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { IllegalTransitionError } from '../producer/purchase-order.ts';
import { AuthError, type AuthErrorCode } from './auth/verifier.ts';
import { ConfigError } from './config.ts';
import {
  ConflictError,
  DependencyUnavailableError,
  DomainError,
  ERROR_CODES,
  InvalidInputError,
  NotFoundError,
} from './errors.ts';
import { PoisonRecordError } from './kafka.ts';
import { SecretBoxError } from './secret-box.ts';
import { FilterError } from './subscriptions/filter.ts';

// Compile-time exhaustive: adding an AuthErrorCode without listing it here fails `tsc`.
const AUTH_CODES: Record<AuthErrorCode, true> = { TOKEN_MISSING: true, TOKEN_INVALID: true };

/** One instance of every error class with a stable code, by where it lives. */
const instances: [string, Error & { code: string }][] = [
  ['NotFoundError', new NotFoundError('subscription', 'sub-1')],
  ['ConflictError', new ConflictError('replay while retrying')],
  ['InvalidInputError', new InvalidInputError([{ path: 'url', message: 'must use https' }])],
  ['IllegalTransitionError', new IllegalTransitionError('Cancelled', 'validated')],
  ['ConfigError', new ConfigError('WEBHOOK_ATTEMPT_TIMEOUT', 'bad')],
  ['SecretBoxError', new SecretBoxError('unreadable')],
  ['PoisonRecordError', new PoisonRecordError('undecodable record')],
  ['DependencyUnavailableError', new DependencyUnavailableError('Kafka')],
  ['FilterError', new FilterError([{ pointer: '/payload.x/$gtee', message: 'unknown operator $gtee' }])],
  ...(Object.keys(AUTH_CODES) as AuthErrorCode[]).map(
    (code) => [`AuthError(${code})`, new AuthError(code, 'token rejected')] as [string, AuthError],
  ),
];

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SOURCE_FOLDERS = ['core', 'producer', 'router', 'dispatcher', 'api', 'infra'];

/** Every `code = '…'` literal declared by a class in the source (tests excluded). */
function declaredCodes(): { file: string; code: string }[] {
  const found: { file: string; code: string }[] = [];
  const visit = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) visit(path);
      else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.test.ts')) {
        for (const match of readFileSync(path, 'utf8').matchAll(/\breadonly\s+code\s*(?::[^=\n,;)]+)?=\s*'([^']+)'/g)) {
          found.push({ file: relative(ROOT, path), code: match[1]! });
        }
      }
    }
  };
  for (const folder of SOURCE_FOLDERS) visit(join(ROOT, folder));
  return found;
}

describe('error codes', () => {
  const codes = instances.map(([, error]) => error.code);

  it('are unique across every error class', () => {
    const duplicates = codes.filter((code, index) => codes.indexOf(code) !== index);
    expect(duplicates).toEqual([]);
    expect(new Set(codes).size).toBe(instances.length);
  });

  it.each(instances)('%s has a stable upper-snake-case code', (_name, error) => {
    expect(error.code).toMatch(/^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$/);
    expect(error).toBeInstanceOf(Error);
  });

  it('every code declared in the source, by any class in any folder, is declared once', () => {
    const declared = declaredCodes();
    // The scan must see at least the classes instantiated above (guards against a broken pattern).
    for (const [, error] of instances.filter(([name]) => !name.startsWith('AuthError'))) {
      expect(declared.map((entry) => entry.code)).toContain(error.code);
    }
    const all = [...declared.map((entry) => `${entry.code} (${entry.file})`), ...Object.keys(AUTH_CODES)];
    const byCode = new Map<string, string[]>();
    for (const label of all) {
      const code = label.split(' ')[0]!;
      byCode.set(code, [...(byCode.get(code) ?? []), label]);
    }
    expect([...byCode.values()].filter((labels) => labels.length > 1)).toEqual([]);
  });

  it('ERROR_CODES lists exactly the codes of the core domain errors', () => {
    const core = instances
      .filter(([, error]) => error instanceof DomainError && !(error instanceof IllegalTransitionError))
      .map(([, error]) => error.code);
    expect([...ERROR_CODES].sort()).toEqual(core.sort());
  });

  it('domain errors are DomainErrors, infrastructure errors are not', () => {
    for (const error of [
      new NotFoundError('a', 'b'),
      new ConflictError('c'),
      new InvalidInputError([]),
      new IllegalTransitionError('Draft', 'cancelled'),
    ]) {
      expect(error).toBeInstanceOf(DomainError);
    }
    for (const error of [new ConfigError('X', 'y'), new SecretBoxError('z'), new AuthError('TOKEN_MISSING', 'm')]) {
      expect(error).not.toBeInstanceOf(DomainError);
    }
  });

  it('messages carry what went wrong', () => {
    expect(new NotFoundError('subscription', 'sub-9').message).toBe('subscription sub-9 was not found');
    expect(
      new InvalidInputError([
        { path: 'url', message: 'must use https' },
        { path: 'eventTypes', message: 'empty' },
      ]).message,
    ).toBe('url: must use https; eventTypes: empty');
    expect(new ConfigError('WEBHOOK_ALLOW_HTTP', '"yes" must be true or false').message).toBe(
      'WEBHOOK_ALLOW_HTTP: "yes" must be true or false',
    );
  });
});
