import { describe, it, expect } from 'vitest';
import { blockedReason, checkWebhookUrl, parseCidrs } from './ssrf.ts';

const none = parseCidrs([]);

describe('blockedReason', () => {
  it.each([
    // IPv4
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'unspecified'],
    ['10.0.0.1', 'private'],
    ['10.255.255.255', 'private'],
    ['100.64.0.1', 'carrier-grade NAT'],
    ['100.127.255.254', 'carrier-grade NAT'],
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['169.254.169.254', 'cloud metadata'],
    ['169.254.0.1', 'link-local'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.0.0.8', 'IETF protocol assignment'],
    ['192.0.2.10', 'documentation'],
    ['192.168.1.1', 'private'],
    ['198.18.0.1', 'benchmarking'],
    ['198.19.255.255', 'benchmarking'],
    ['198.51.100.7', 'documentation'],
    ['203.0.113.99', 'documentation'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.250', 'multicast'],
    ['240.0.0.1', 'reserved'],
    ['255.255.255.254', 'reserved'],
    ['255.255.255.255', 'broadcast'],
    // IPv6
    ['::', 'unspecified'],
    ['::1', 'loopback'],
    ['0:0:0:0:0:0:0:1', 'loopback'],
    ['fc00::1', 'unique local'],
    ['fd12:3456:789a::1', 'unique local'],
    ['fe80::1', 'link-local'],
    ['fe80::1%eth0', 'link-local'],
    ['febf:ffff::1', 'link-local'],
    ['ff02::1', 'multicast'],
    ['ff05::1:3', 'multicast'],
    ['2001:db8::1', 'documentation'],
    ['2001:DB8:ffff::1', 'documentation'],
    ['fec0::1', 'reserved IPv6'],
    ['100::1', 'reserved IPv6'],
    ['64:ff9b:1::a00:1', 'local-use NAT64'],
    // IPv6 forms embedding a blocked IPv4 address
    ['::ffff:127.0.0.1', 'IPv4-mapped address embedding 127.0.0.1, a loopback'],
    ['::ffff:7f00:1', 'IPv4-mapped address embedding 127.0.0.1, a loopback'],
    ['::FFFF:A9FE:A9FE', 'IPv4-mapped address embedding 169.254.169.254, a cloud metadata'],
    ['0:0:0:0:0:ffff:10.1.2.3', 'IPv4-mapped address embedding 10.1.2.3, a private'],
    ['::ffff:0:192.168.0.1', 'IPv4-translated address embedding 192.168.0.1, a private'],
    ['::127.0.0.1', 'IPv4-compatible address embedding 127.0.0.1, a loopback'],
    ['::a00:1', 'IPv4-compatible address embedding 10.0.0.1, a private'],
    ['64:ff9b::7f00:1', 'NAT64 address embedding 127.0.0.1, a loopback'],
    ['64:ff9b::169.254.169.254', 'NAT64 address embedding 169.254.169.254, a cloud metadata'],
    ['2002:7f00:1::', '6to4 address embedding 127.0.0.1, a loopback'],
    ['2002:c0a8:101:1::1', '6to4 address embedding 192.168.1.1, a private'],
    // Teredo: client 127.0.0.1 is stored inverted as 80ff:fffe.
    ['2001:0:4136:e378:8000:63bf:80ff:fffe', 'Teredo address embedding 127.0.0.1, a loopback'],
    ['2001::ffff:ffff:f5ff:fffe', 'Teredo address embedding 10.0.0.1, a private'],
    // RFC 4380 §4 example: client 192.0.2.45.
    ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'Teredo address embedding 192.0.2.45, a documentation'],
  ])('blocks %s (%s)', (address, reason) => {
    expect(blockedReason(address, none)).toContain(reason);
  });

  it.each([
    '8.8.8.8',
    '1.1.1.1',
    '93.184.215.14',
    '100.63.255.255',
    '100.128.0.0',
    '172.15.255.255',
    '172.32.0.0',
    '192.0.1.1',
    '198.17.255.255',
    '198.20.0.0',
    '223.255.255.255',
    '2606:4700::1111',
    '2a00:1450:4001:80b::200e',
    '::ffff:8.8.8.8',
    '::ffff:808:808',
    '64:ff9b::1.1.1.1',
    '2002:808:808::1',
    '2001:0:4136:e378:8000:63bf:f7f7:f7f7', // Teredo client 8.8.8.8
  ])('passes public %s', (address) => {
    expect(blockedReason(address, none)).toBeUndefined();
  });

  it.each(['', 'example.com', '127.1', '0x7f.0.0.1', '010.0.0.1', '1.2.3.4/32', '[::1]', '::1::2', '1.2.3.256'])(
    'refuses non-address %j',
    (address) => {
      expect(blockedReason(address, none)).toBe('not an IP address');
    },
  );

  describe('allowlist', () => {
    const allowed = parseCidrs(['127.0.0.1/32', '10.0.0.0/8', '::1/128']);

    it.each(['127.0.0.1', '10.20.30.40', '::1', '::ffff:127.0.0.1', '64:ff9b::a01:203'])('exempts %s', (address) => {
      expect(blockedReason(address, allowed)).toBeUndefined();
    });

    it.each(['127.0.0.2', '192.168.0.1', '169.254.169.254', '::2', 'fe80::1', '::ffff:127.0.0.2'])(
      'still blocks %s',
      (address) => {
        expect(blockedReason(address, allowed)).toBeDefined();
      },
    );

    it('does not let an IPv4 block exempt native IPv6 loopback', () => {
      expect(blockedReason('::1', parseCidrs(['127.0.0.0/8']))).toContain('loopback');
    });
  });
});

describe('parseCidrs', () => {
  it('parses v4 and v6 blocks, clearing host bits', () => {
    expect(parseCidrs(['127.0.0.1/32', '10.1.2.3/8', '::1/128', 'fd00::/8', ' 192.168.0.0/16 '])).toEqual([
      { family: 4, network: 0x7f000001n, prefix: 32, text: '127.0.0.1/32' },
      { family: 4, network: 0x0a000000n, prefix: 8, text: '10.1.2.3/8' },
      { family: 6, network: 1n, prefix: 128, text: '::1/128' },
      { family: 6, network: 0xfdn << 120n, prefix: 8, text: 'fd00::/8' },
      { family: 4, network: 0xc0a80000n, prefix: 16, text: '192.168.0.0/16' },
    ]);
  });

  it('reads a bare address as a single host', () => {
    expect(parseCidrs(['127.0.0.1', '::1'])).toMatchObject([{ prefix: 32 }, { prefix: 128 }]);
  });

  it('accepts /0', () => {
    expect(blockedReason('127.0.0.1', parseCidrs(['0.0.0.0/0']))).toBeUndefined();
  });

  it.each([
    '',
    'nonsense',
    '10.0.0.0/33',
    '::/129',
    '10.0.0.0/-1',
    '10.0.0.0/',
    '10.0.0.0/8/8',
    '10.0.0/8',
    'fe80::%eth0/64',
    '10.0.0.0/0x8',
  ])('throws naming bad entry %j', (entry) => {
    expect(() => parseCidrs(['127.0.0.1/32', entry])).toThrow(`"${entry}"`);
  });
});

describe('checkWebhookUrl', () => {
  const https = { allowHttp: false, allowed: none };
  const http = { allowHttp: true, allowed: none };

  it.each([
    'https://receiver.example.com/hooks',
    'https://8.8.8.8/hook',
    'https://1.1.1.1:8443/x?y=z#f',
    'https://[2606:4700::1111]/hook',
    'HTTPS://Receiver.Example.COM/',
  ])('accepts %s', async (url) => {
    expect(await checkWebhookUrl(url, https)).toBeUndefined();
  });

  it.each([
    // Alternative IPv4 spellings, normalized by WHATWG URL parsing to a dotted quad.
    ['http://127.0.0.1/', 'url host 127.0.0.1 is a loopback address'],
    ['http://2130706433/', 'url host 127.0.0.1 is a loopback address'],
    ['http://017700000001/', 'url host 127.0.0.1 is a loopback address'],
    ['http://0x7f000001/', 'url host 127.0.0.1 is a loopback address'],
    ['http://0x7f.1/', 'url host 127.0.0.1 is a loopback address'],
    ['http://0177.0.0.1/', 'url host 127.0.0.1 is a loopback address'],
    ['http://127.1/', 'url host 127.0.0.1 is a loopback address'],
    ['http://127.0.0.1./', 'url host 127.0.0.1 is a loopback address'],
    ['http://%31%32%37.0.0.1/', 'url host 127.0.0.1 is a loopback address'],
    ['http://0/', 'url host 0.0.0.0 is an unspecified ("this network") address'],
    ['http://0.0.0.0:8080/', 'url host 0.0.0.0 is an unspecified ("this network") address'],
    ['http://169.254.169.254/latest/meta-data/', 'url host 169.254.169.254 is a cloud metadata address'],
    ['http://10.0.0.1/', 'url host 10.0.0.1 is a private address'],
    ['http://3232235777/', 'url host 192.168.1.1 is a private address'],
    ['http://100.64.0.1/', 'url host 100.64.0.1 is a carrier-grade NAT (shared) address'],
    // IPv6 literals, including forms embedding IPv4.
    ['http://[::1]/', 'url host [::1] is a loopback address'],
    ['http://[::]/', 'url host [::] is an unspecified address'],
    ['http://[fe80::1]/', 'url host [fe80::1] is a link-local address'],
    ['http://[fd00::1]/', 'url host [fd00::1] is a unique local (private) address'],
    [
      'https://[::ffff:127.0.0.1]/',
      'url host [::ffff:7f00:1] is an IPv4-mapped address embedding 127.0.0.1, a loopback',
    ],
    ['https://[::ffff:7f00:1]/', 'url host [::ffff:7f00:1] is an IPv4-mapped address embedding 127.0.0.1, a loopback'],
    ['https://[::127.0.0.1]/', 'url host [::7f00:1] is an IPv4-compatible address embedding 127.0.0.1, a loopback'],
    ['https://[64:ff9b::7f00:1]/', 'url host [64:ff9b::7f00:1] is a NAT64 address embedding 127.0.0.1, a loopback'],
    ['https://[64:ff9b::10.0.0.1]/', 'url host [64:ff9b::a00:1] is a NAT64 address embedding 10.0.0.1, a private'],
    ['https://[2002:7f00:1::]/', 'url host [2002:7f00:1::] is a 6to4 address embedding 127.0.0.1, a loopback'],
    ['https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/', 'is a Teredo address embedding 127.0.0.1, a loopback'],
    // Names that are local without asking DNS.
    ['https://localhost/', 'url host localhost is a localhost name'],
    ['https://LOCALHOST:8443/', 'url host localhost is a localhost name'],
    ['https://localhost./', 'url host localhost. is a localhost name'],
    ['https://api.localhost/', 'url host api.localhost is a localhost name'],
    ['https://metadata.google.internal/', 'url host metadata.google.internal is an internal name'],
    ['https://printer.local/', 'url host printer.local is a link-local (mDNS) name'],
  ])('blocks %s', async (url, message) => {
    const result = await checkWebhookUrl(url, http);
    expect(result).toContain(message);
  });

  it.each([
    ['http://receiver.example.com/', { allowHttp: false }, 'url must use https'],
    ['ftp://receiver.example.com/', { allowHttp: false }, 'url must use https'],
    ['ftp://receiver.example.com/', { allowHttp: true }, 'url must use http or https'],
    ['ws://receiver.example.com/', { allowHttp: true }, 'url must use http or https'],
    ['file:///etc/passwd', { allowHttp: true }, 'url must use http or https'],
    ['https://user:pass@receiver.example.com/', { allowHttp: false }, 'url must not contain user-info'],
    ['https://user@receiver.example.com/', { allowHttp: false }, 'url must not contain user-info'],
    ['https://:secret@receiver.example.com/', { allowHttp: false }, 'url must not contain user-info'],
    ['not a url', { allowHttp: false }, 'url must be an absolute URL'],
    ['/relative/path', { allowHttp: false }, 'url must be an absolute URL'],
    ['', { allowHttp: false }, 'url must be an absolute URL'],
    ['https://', { allowHttp: false }, 'url must be an absolute URL'],
    ['https://1.2.3.999/', { allowHttp: false }, 'url must be an absolute URL'],
    ['https://[fe80::1%25eth0]/', { allowHttp: false }, 'url must be an absolute URL'],
  ])('refuses %j (allowHttp %j)', async (url, { allowHttp }, message) => {
    expect(await checkWebhookUrl(url, { allowHttp, allowed: none })).toBe(message);
  });

  it('accepts http only when allowHttp', async () => {
    expect(await checkWebhookUrl('http://receiver.example.com/', http)).toBeUndefined();
    expect(await checkWebhookUrl('http://receiver.example.com/', https)).toBe('url must use https');
  });

  it('accepts exactly 2048 characters and refuses 2049', async () => {
    const base = 'https://receiver.example.com/';
    const at = base + 'a'.repeat(2048 - base.length);
    expect(at).toHaveLength(2048);
    expect(await checkWebhookUrl(at, https)).toBeUndefined();
    expect(await checkWebhookUrl(at + 'a', https)).toBe('url must be at most 2048 characters');
  });

  it('lets the allowlist exempt a loopback receiver', async () => {
    const allowed = parseCidrs(['127.0.0.1/32']);
    expect(await checkWebhookUrl('http://127.0.0.1:9999/hook', { allowHttp: true, allowed })).toBeUndefined();
    expect(await checkWebhookUrl('http://127.1:9999/hook', { allowHttp: true, allowed })).toBeUndefined();
    expect(await checkWebhookUrl('http://127.0.0.2:9999/hook', { allowHttp: true, allowed })).toContain('loopback');
    expect(await checkWebhookUrl('http://[::1]:9999/hook', { allowHttp: true, allowed })).toContain('loopback');
  });

  describe('with a resolver', () => {
    const resolver = (answers: Record<string, string[]>) => {
      const asked: string[] = [];
      const resolve = async (host: string) => {
        asked.push(host);
        const addresses = answers[host];
        if (!addresses) throw new Error(`ENOTFOUND ${host}`);
        return addresses;
      };
      return { asked, resolve };
    };

    it('accepts a name resolving to public addresses', async () => {
      const { asked, resolve } = resolver({ 'receiver.example.com': ['93.184.215.14', '2606:4700::1111'] });
      expect(await checkWebhookUrl('https://receiver.example.com/', { ...https, resolve })).toBeUndefined();
      expect(asked).toEqual(['receiver.example.com']);
    });

    it.each([
      [['10.0.0.5'], 'url host evil.example.com resolves to 10.0.0.5, a private address'],
      [['8.8.8.8', '127.0.0.1'], 'url host evil.example.com resolves to 127.0.0.1, a loopback address'],
      [['2606:4700::1111', '::ffff:169.254.169.254'], 'resolves to ::ffff:169.254.169.254, an IPv4-mapped address'],
      [['fd00::1'], 'url host evil.example.com resolves to fd00::1, a unique local (private) address'],
    ])('blocks a name resolving to %j', async (addresses, message) => {
      const { resolve } = resolver({ 'evil.example.com': addresses });
      expect(await checkWebhookUrl('https://evil.example.com/', { ...https, resolve })).toContain(message);
    });

    it('lets the allowlist exempt a resolved address', async () => {
      const { resolve } = resolver({ 'receiver.corp.example': ['10.1.2.3'] });
      const allowed = parseCidrs(['10.0.0.0/8']);
      expect(await checkWebhookUrl('https://receiver.corp.example/', { ...https, allowed, resolve })).toBeUndefined();
    });

    it('refuses a name that does not resolve', async () => {
      const { resolve } = resolver({ 'empty.example.com': [] });
      expect(await checkWebhookUrl('https://missing.example.com/', { ...https, resolve })).toBe(
        'url host missing.example.com could not be resolved',
      );
      expect(await checkWebhookUrl('https://empty.example.com/', { ...https, resolve })).toBe(
        'url host empty.example.com could not be resolved',
      );
    });

    it('does not resolve IP literals', async () => {
      const { asked, resolve } = resolver({});
      expect(await checkWebhookUrl('https://8.8.8.8/', { ...https, resolve })).toBeUndefined();
      expect(await checkWebhookUrl('https://[2606:4700::1111]/', { ...https, resolve })).toBeUndefined();
      expect(asked).toEqual([]);
    });

    it('refuses localhost without asking DNS when nothing is allowlisted', async () => {
      const { asked, resolve } = resolver({ localhost: ['8.8.8.8'] });
      expect(await checkWebhookUrl('https://localhost/', { ...https, resolve })).toBe(
        'url host localhost is a localhost name',
      );
      expect(asked).toEqual([]);
    });

    it('accepts localhost only when every address it resolves to is allowlisted', async () => {
      const { resolve } = resolver({ localhost: ['127.0.0.1', '::1'] });
      const opts = { allowHttp: true, resolve };
      const both = parseCidrs(['127.0.0.1/32', '::1/128']);
      const v4Only = parseCidrs(['127.0.0.1/32']);
      expect(await checkWebhookUrl('http://localhost:9999/', { ...opts, allowed: both })).toBeUndefined();
      expect(await checkWebhookUrl('http://localhost:9999/', { ...opts, allowed: v4Only })).toBe(
        'url host localhost is a localhost name',
      );
    });

    it('does not let a public answer launder a local name', async () => {
      const { resolve } = resolver({ 'thing.internal': ['8.8.8.8'] });
      const allowed = parseCidrs(['10.0.0.0/8']);
      expect(await checkWebhookUrl('https://thing.internal/', { ...https, allowed, resolve })).toBe(
        'url host thing.internal is an internal name',
      );
    });
  });
});
