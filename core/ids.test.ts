import { describe, expect, it } from 'vitest';
import { deliveryIdFor, newId, newTimeOrderedId } from './ids.ts';

// 8-4-4-4-12 lower-case hex, version nibble 8 (RFC 9562 custom UUID), variant bits 10xx (8, 9, a or b).
const UUID_V8 = /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('deliveryIdFor', () => {
  it('is deterministic: the same (event, subscription) always gives the same id', () => {
    const first = deliveryIdFor('evt-1', 'sub-1');
    for (let i = 0; i < 5; i += 1) expect(deliveryIdFor('evt-1', 'sub-1')).toBe(first);
  });

  it('is stable across releases: a reprocessed event must rewrite the series it started before a deploy', () => {
    // sha256("evt-1\0sub-1") = f48da98066ced933273dc5dc2b40e28c…, with the version and variant nibbles set.
    expect(deliveryIdFor('evt-1', 'sub-1')).toBe('f48da980-66ce-8933-a73d-c5dc2b40e28c');
  });

  it.each([
    ['another subscription', ['evt-1', 'sub-1'], ['evt-1', 'sub-2']],
    ['another event', ['evt-1', 'sub-1'], ['evt-2', 'sub-1']],
    ['swapped arguments', ['a', 'b'], ['b', 'a']],
    ['same concatenation, other split', ['ab', 'c'], ['a', 'bc']],
    ['case', ['EVT', 'sub'], ['evt', 'sub']],
    ['empty parts', ['', 'x'], ['x', '']],
  ])('differs for %s', (_name, [eventA, subA], [eventB, subB]) => {
    expect(deliveryIdFor(eventA!, subA!)).not.toBe(deliveryIdFor(eventB!, subB!));
  });

  it('is UUID-shaped with version 8 and the RFC variant, and does not collide, over many inputs', () => {
    const ids = new Set<string>();
    const variants = new Set<string>();
    for (let e = 0; e < 100; e += 1) {
      for (let s = 0; s < 20; s += 1) {
        const id = deliveryIdFor(`0b7c6f1e-3a52-4c1b-9d7e-${String(e).padStart(12, '0')}`, `sub-${s}`);
        expect(id).toMatch(UUID_V8);
        ids.add(id);
        variants.add(id[19]!);
      }
    }
    expect(ids.size).toBe(2_000);
    expect([...variants].sort()).toEqual(['8', '9', 'a', 'b']);
  });

  it('handles unicode and separators in its inputs', () => {
    expect(deliveryIdFor('évènement-😀', 'sub/with:odd\u0001chars')).toMatch(UUID_V8);
  });
});

describe('newId', () => {
  it('is a random v4 UUID, different every time', () => {
    const ids = Array.from({ length: 100 }, () => newId());
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(new Set(ids).size).toBe(100);
  });
});

describe('newTimeOrderedId', () => {
  const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

  it('is a version 7 UUID whose text sorts by creation time, and unique within a millisecond', () => {
    const times = [0, 1, 1_700_000_000_000, 1_700_000_000_001, 1_800_000_000_000, 2 ** 48 - 1];
    const ids = times.map((time) => newTimeOrderedId(time));
    for (const id of ids) expect(id).toMatch(UUID_V7);
    expect([...ids].sort()).toEqual(ids);
    const same = new Set(Array.from({ length: 1_000 }, () => newTimeOrderedId(1_700_000_000_000)));
    expect(same.size).toBe(1_000);
  });
});
