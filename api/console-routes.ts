import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import { request, type Dispatcher } from 'undici';
import { sendProblem } from '../core/http/problem.ts';

/** Where the operator console's files are: console/ at the repository root (dist/console in the image). */
export const CONSOLE_ROOT = fileURLToPath(new URL('../console/', import.meta.url));

export interface ConsoleOptions {
  /** Folder of the console's static files; read once, when the gateway starts. */
  root: string;
  /** The identity provider's token endpoint, to which the sign-in form is forwarded (client credentials). */
  tokenUrl: string;
  /** `audience` of the tokens asked for: the APIs' audience (AUTH_AUDIENCE). */
  audience: string;
  /** Outbound HTTP to the identity provider (the global undici dispatcher when absent; a MockAgent in tests). */
  dispatcher?: Dispatcher;
}

/** Content types of the files served; any other file under the root (sources, dotfiles) is never served. */
const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
};

/**
 * Only this origin: the console's scripts and styles are files (no inline code), and it calls the APIs and its sign-in
 * route on the gateway itself. `form-action 'none'` keeps a form from ever being submitted natively (a client secret
 * must never end up in a URL, even if a script failed to load).
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** How long the gateway waits for the identity provider before the sign-in answers 502. */
const TOKEN_TIMEOUT_MS = 10_000;

interface StaticFile {
  full: string;
  type: string;
}

/**
 * The operator console under /console: its static files, and POST /console/token, which forwards a sign-in to the
 * identity provider's token endpoint. Hidden from the OpenAPI documents; the console itself only calls the public APIs.
 */
export const consoleRoutes: FastifyPluginAsync<ConsoleOptions> = async (app, options) => {
  // Every servable file is listed here at start, by its path relative to the root: a request names a key of this map
  // or gets 404, so no request path (`..`, encoded or not, symlinks) can reach a file outside the folder. Contents are
  // read per request (small files, in the OS cache), so an edited file is served as edited without a restart.
  const files = await listFiles(options.root);
  const hidden = { schema: { hide: true } };

  app.get('/console', hidden, async (_request, reply) => secure(reply).redirect('/console/', 308));
  app.get<{ Params: { '*': string } }>('/console/*', hidden, async (req, reply) => {
    const file = files.get(req.params['*'] === '' ? 'index.html' : req.params['*']);
    const body = file ? await readFile(file.full).catch(() => undefined) : undefined;
    if (!file || !body) {
      return sendProblem(secure(reply), { status: 404, title: 'Not found', detail: `no console file ${req.url}` });
    }
    const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`;
    secure(reply)
      // No fingerprints in the file names, so every use revalidates (a cheap 304): a new version is never stale.
      .header('cache-control', 'no-cache')
      .header('etag', etag);
    const ifNoneMatch = req.headers['if-none-match'];
    if (ifNoneMatch?.split(',').some((tag) => tag.trim() === etag)) return reply.code(304).send();
    return reply.type(file.type).send(body);
  });

  app.post<{ Body: { clientId: string; clientSecret: string } }>(
    '/console/token',
    {
      bodyLimit: 4096,
      schema: {
        hide: true,
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['clientId', 'clientSecret'],
          properties: {
            clientId: { type: 'string', minLength: 1, maxLength: 512 },
            clientSecret: { type: 'string', minLength: 1, maxLength: 512 },
          },
        },
      },
    },
    async (req, reply) => {
      secure(reply).header('cache-control', 'no-store');
      // The secret only passes through: it is neither logged nor kept, and goes to the configured endpoint only.
      const answer = await askToken(options, req.body.clientId, req.body.clientSecret).catch((error: Error) => {
        req.log.warn({ err: error }, 'identity provider unreachable for a console sign-in');
        return undefined;
      });
      if (answer === undefined || answer.status >= 500) {
        return sendProblem(reply, {
          status: 502,
          title: 'Identity provider unavailable',
          detail: 'the identity provider did not answer the sign-in; retry shortly',
        });
      }
      const body = answer.body as { access_token?: unknown; expires_in?: unknown; error_description?: unknown };
      if (answer.status === 200 && typeof body.access_token === 'string') {
        const expiresIn = typeof body.expires_in === 'number' ? body.expires_in : null;
        return { accessToken: body.access_token, expiresIn };
      }
      return sendProblem(reply, {
        status: 401,
        title: 'Sign-in refused',
        detail:
          typeof body.error_description === 'string'
            ? body.error_description
            : `the identity provider answered ${answer.status}`,
      });
    },
  );
};

/** Headers of every console answer. */
function secure(reply: FastifyReply): FastifyReply {
  return reply
    .header('content-security-policy', CONSOLE_CSP)
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
    .header('x-frame-options', 'DENY');
}

async function askToken(options: ConsoleOptions, clientId: string, clientSecret: string) {
  const response = await request(options.tokenUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify({
      grant_type: 'client_credentials',
      client_id: clientId,
      client_secret: clientSecret,
      audience: options.audience,
    }),
    headersTimeout: TOKEN_TIMEOUT_MS,
    bodyTimeout: TOKEN_TIMEOUT_MS,
    ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
  });
  const text = await response.body.text();
  let body: unknown = {};
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: judged by its status alone
  }
  return { status: response.statusCode, body: typeof body === 'object' && body !== null ? body : {} };
}

/** Every file with a served extension under `root`, by its slash-separated relative path; dot-names are skipped. */
async function listFiles(root: string): Promise<Map<string, StaticFile>> {
  const files = new Map<string, StaticFile>();
  for (const entry of await readdir(root, { recursive: true, withFileTypes: true })) {
    // Dirent.isFile() is false for a symbolic link: a link never makes a file outside the root servable.
    const type = CONTENT_TYPES[path.extname(entry.name)];
    if (!entry.isFile() || type === undefined) continue;
    const full = path.join(entry.parentPath, entry.name);
    const relative = path.relative(root, full).split(path.sep);
    if (relative.some((segment) => segment.startsWith('.'))) continue;
    files.set(relative.join('/'), { full, type });
  }
  return files;
}
