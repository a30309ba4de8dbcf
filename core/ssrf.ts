import { isIP } from 'node:net';

/** One CIDR block of `WEBHOOK_ALLOWED_CIDRS`; `network` has its host bits cleared. */
export interface Cidr {
  readonly family: 4 | 6;
  readonly network: bigint;
  readonly prefix: number;
  readonly text: string;
}

/** An IP address as a 32-bit (v4) or 128-bit (v6) integer. */
interface Ip {
  readonly family: 4 | 6;
  readonly value: bigint;
}

const MAX_URL_LENGTH = 2048;

/** Parsed allowlist from WEBHOOK_ALLOWED_CIDRS, e.g. ['127.0.0.1/32','10.0.0.0/8','::1/128']. Throws Error naming the bad entry. */
export function parseCidrs(list: string[]): Cidr[] {
  return list.map((entry) => {
    const text = entry.trim();
    const [address = '', prefixText, extra] = text.split('/');
    const ip = parseIp(address);
    if (!ip || address.includes('%') || extra !== undefined) {
      throw new Error(`invalid CIDR "${entry}": expected an IP address with an optional /prefix`);
    }
    const bits = ip.family === 4 ? 32 : 128;
    // A bare address means that single host.
    const prefix = prefixText === undefined ? bits : /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : NaN;
    if (!(prefix >= 0 && prefix <= bits)) {
      throw new Error(`invalid CIDR "${entry}": prefix length must be 0 to ${bits}`);
    }
    return { family: ip.family, network: ip.value & mask(prefix, bits), prefix, text };
  });
}

/** Why an IP address (v4 or v6 literal) is blocked, or undefined if it is a public address or inside `allowed`. */
export function blockedReason(address: string, allowed: Cidr[]): string | undefined {
  const ip = parseIp(address);
  if (!ip) return 'not an IP address';
  if (inAny(ip, allowed)) return undefined;
  if (ip.family === 4) return v4Reason(ip.value);
  const verdict = v6Verdict(ip.value);
  if (!verdict) return undefined;
  // An address that only stands for an embedded IPv4 one is as allowed as that IPv4 address.
  if (verdict.embedded !== undefined && inAny({ family: 4, value: verdict.embedded }, allowed)) return undefined;
  return verdict.reason;
}

/** Validates a subscriber URL string per DESIGN §7: absolute https (http only when allowHttp), no user-info, ≤ 2048 chars, host not blocked. When the host is a name (not an IP literal) and `resolve` is given, every resolved address must pass too. Returns undefined when fine, else a human message (e.g. "url host 127.0.0.1 is a loopback address"). */
export async function checkWebhookUrl(
  url: string,
  opts: { allowHttp: boolean; allowed: Cidr[]; resolve?: (host: string) => Promise<string[]> },
): Promise<string | undefined> {
  if (url.length > MAX_URL_LENGTH) return `url must be at most ${MAX_URL_LENGTH} characters`;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'url must be an absolute URL';
  }
  const schemeOk = parsed.protocol === 'https:' || (opts.allowHttp && parsed.protocol === 'http:');
  if (!schemeOk) return opts.allowHttp ? 'url must use http or https' : 'url must use https';
  if (parsed.username !== '' || parsed.password !== '') return 'url must not contain user-info';

  // WHATWG parsing has already turned decimal, octal, hex and short IPv4 spellings into dotted quads,
  // and IPv6 literals into their compressed form with brackets.
  const host = parsed.hostname;
  const literal = host.startsWith('[') ? host.slice(1, -1) : host;
  if (isIP(literal) !== 0) {
    const reason = blockedReason(literal, opts.allowed);
    return reason === undefined ? undefined : `url host ${host} is ${reason}`;
  }

  const name = host.endsWith('.') ? host.slice(0, -1) : host;
  const localName = isLocalName(name);
  // A local name is refused without DNS, unless it resolves only into the allowlist (a local test receiver).
  if (localName && (!opts.resolve || opts.allowed.length === 0)) return `url host ${host} is ${localName}`;
  if (!opts.resolve) return undefined;

  let addresses: string[];
  try {
    addresses = await opts.resolve(host);
  } catch {
    return `url host ${host} could not be resolved`;
  }
  if (addresses.length === 0) return `url host ${host} could not be resolved`;
  for (const address of addresses) {
    if (localName) {
      const ip = parseIp(address);
      if (!ip || !inAny(ip, opts.allowed)) return `url host ${host} is ${localName}`;
      continue;
    }
    const reason = blockedReason(address, opts.allowed);
    if (reason !== undefined) return `url host ${host} resolves to ${address}, ${reason}`;
  }
  return undefined;
}

function isLocalName(name: string): string | undefined {
  if (name === 'localhost' || name.endsWith('.localhost')) return 'a localhost name';
  if (name.endsWith('.internal')) return 'an internal name';
  if (name.endsWith('.local')) return 'a link-local (mDNS) name';
  return undefined;
}

// Ordered: the first matching block wins, so narrower blocks come before the ones containing them.
const V4_BLOCKS: ReadonlyArray<readonly [Cidr, string]> = (
  [
    ['0.0.0.0/8', 'an unspecified ("this network") address'],
    ['10.0.0.0/8', 'a private address'],
    ['100.64.0.0/10', 'a carrier-grade NAT (shared) address'],
    ['127.0.0.0/8', 'a loopback address'],
    ['169.254.169.254/32', 'a cloud metadata address'],
    ['169.254.0.0/16', 'a link-local address'],
    ['172.16.0.0/12', 'a private address'],
    ['192.0.0.0/24', 'an IETF protocol assignment address'],
    ['192.0.2.0/24', 'a documentation address'],
    ['192.168.0.0/16', 'a private address'],
    ['198.18.0.0/15', 'a benchmarking address'],
    ['198.51.100.0/24', 'a documentation address'],
    ['203.0.113.0/24', 'a documentation address'],
    ['224.0.0.0/4', 'a multicast address'],
    ['255.255.255.255/32', 'a broadcast address'],
    ['240.0.0.0/4', 'a reserved address'],
  ] as const
).map(([text, reason]) => [parseCidrs([text])[0]!, reason] as const);

const V6_BLOCKS: ReadonlyArray<readonly [Cidr, string]> = (
  [
    ['::/128', 'an unspecified address'],
    ['::1/128', 'a loopback address'],
    // RFC 8215 local-use NAT64: the embedded IPv4 position depends on the operator's prefix length, and the
    // range is not globally reachable anyway, so it is refused outright.
    ['64:ff9b:1::/48', 'a local-use NAT64 address'],
    ['2001:db8::/32', 'a documentation address'],
    ['fc00::/7', 'a unique local (private) address'],
    ['fe80::/10', 'a link-local address'],
    ['ff00::/8', 'a multicast address'],
  ] as const
).map(([text, reason]) => [parseCidrs([text])[0]!, reason] as const);

const LOW32 = 0xffff_ffffn;

/** IPv6 ranges that carry an IPv4 address, and where: the IPv4 rules then decide. */
const V6_EMBEDDING: ReadonlyArray<readonly [Cidr, string, (value: bigint) => bigint]> = (
  [
    ['::ffff:0:0/96', 'an IPv4-mapped', (v) => v & LOW32],
    ['::ffff:0:0:0/96', 'an IPv4-translated', (v) => v & LOW32],
    ['64:ff9b::/96', 'a NAT64', (v) => v & LOW32],
    ['2002::/16', 'a 6to4', (v) => (v >> 80n) & LOW32],
    // Teredo stores the client address inverted in the last 32 bits.
    ['2001::/32', 'a Teredo', (v) => (v & LOW32) ^ LOW32],
    // IPv4-compatible (deprecated); :: and ::1 are matched earlier by V6_BLOCKS.
    ['::/96', 'an IPv4-compatible', (v) => v & LOW32],
  ] satisfies Array<[string, string, (value: bigint) => bigint]>
).map(([text, kind, extract]) => [parseCidrs([text])[0]!, kind, extract] as const);

const GLOBAL_UNICAST = parseCidrs(['2000::/3'])[0]!;

function v4Reason(value: bigint): string | undefined {
  return V4_BLOCKS.find(([cidr]) => contains(cidr, value))?.[1];
}

function v6Verdict(value: bigint): { reason: string; embedded?: bigint } | undefined {
  const block = V6_BLOCKS.find(([cidr]) => contains(cidr, value));
  if (block) return { reason: block[1] };
  const embedding = V6_EMBEDDING.find(([cidr]) => contains(cidr, value));
  if (embedding) {
    const embedded = embedding[2](value);
    const reason = v4Reason(embedded);
    return reason === undefined
      ? undefined
      : { reason: `${embedding[1]} address embedding ${formatV4(embedded)}, ${reason}`, embedded };
  }
  // Everything outside 2000::/3 is unallocated or special-purpose (site-local fec0::/10, discard 100::/64, …).
  return contains(GLOBAL_UNICAST, value) ? undefined : { reason: 'a reserved IPv6 address' };
}

function inAny(ip: Ip, cidrs: Cidr[]): boolean {
  return cidrs.some((cidr) => cidr.family === ip.family && contains(cidr, ip.value));
}

function contains(cidr: Cidr, value: bigint): boolean {
  return (value & mask(cidr.prefix, cidr.family === 4 ? 32 : 128)) === cidr.network;
}

function mask(prefix: number, bits: number): bigint {
  const all = (1n << BigInt(bits)) - 1n;
  return all ^ ((1n << BigInt(bits - prefix)) - 1n);
}

/** Parses a strict v4 dotted quad or v6 literal (zone id ignored); undefined when it is neither. */
function parseIp(text: string): Ip | undefined {
  const family = isIP(text);
  if (family === 4) {
    return { family, value: text.split('.').reduce((acc, part) => (acc << 8n) | BigInt(part), 0n) };
  }
  if (family !== 6) return undefined;
  let body = text.replace(/%.*$/, '').toLowerCase();
  // A trailing dotted quad (::ffff:1.2.3.4) stands for the last two 16-bit groups.
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(body);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    body = `${body.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = body.split('::');
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups =
    tail === undefined
      ? headGroups
      : [...headGroups, ...Array<string>(8 - headGroups.length - tailGroups.length).fill('0'), ...tailGroups];
  return { family, value: groups.reduce((acc, group) => (acc << 16n) | BigInt(parseInt(group, 16)), 0n) };
}

function formatV4(value: bigint): string {
  return [24n, 16n, 8n, 0n].map((shift) => String((value >> shift) & 0xffn)).join('.');
}
