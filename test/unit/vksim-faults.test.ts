import { describe, expect, it } from 'vitest';
import { crashTargets, FaultBook, FaultRuleError, normaliseFaultRule } from '../vksim/faults.js';

describe('normaliseFaultRule', () => {
  it('accepts the op.mode spelling and the split spelling alike', () => {
    expect(normaliseFaultRule({ op: 'hibernate.push.fail' }, 1)).toMatchObject({
      point: 'hibernate.push',
      mode: 'fail',
    });
    expect(normaliseFaultRule({ op: 'hibernate.push', mode: 'delay', delayMs: 50 }, 2)).toMatchObject({
      point: 'hibernate.push',
      mode: 'delay',
      delayMs: 50,
    });
  });

  it('maps the aliases evidence.error, postclone.fail and vm.crash', () => {
    expect(normaliseFaultRule({ op: 'evidence.error' }, 1)).toMatchObject({
      point: 'evidence',
      mode: 'fail',
    });
    expect(normaliseFaultRule({ op: 'postclone.fail' }, 1)).toMatchObject({ point: 'ready', mode: 'fail' });
    expect(normaliseFaultRule({ op: 'vm.crash' }, 1)).toMatchObject({ point: 'vm.crash', mode: 'fail' });
  });

  it('rejects unknown ops, contradictions, bad regexes, bad counts and delay rules without delayMs', () => {
    expect(() => normaliseFaultRule({ op: 'explode' }, 1)).toThrow(FaultRuleError);
    expect(() => normaliseFaultRule({ op: 'create.fail', mode: 'delay' }, 1)).toThrow(/contradicts/);
    expect(() => normaliseFaultRule({ op: 'create', mode: 'fail', vm: '(' }, 1)).toThrow(/regex/);
    expect(() => normaliseFaultRule({ op: 'create.fail', count: 0 }, 1)).toThrow(/count/);
    expect(() => normaliseFaultRule({ op: 'create.delay' }, 1)).toThrow(/delayMs/);
    expect(() => normaliseFaultRule({ op: 'create' }, 1)).toThrow(/mode/);
    expect(() => normaliseFaultRule({ op: 'vm.crash', mode: 'delay', delayMs: 1 }, 1)).toThrow();
  });
});

describe('FaultBook', () => {
  it('fires a counted rule exactly count times, then forgets it', () => {
    const book = new FaultBook();
    book.add({ op: 'hibernate.push.fail', count: 2 });
    expect(book.shouldFail('hibernate.push', 'vk-a-b-0')).toBe(true);
    expect(book.shouldFail('hibernate.push', 'vk-a-b-0')).toBe(true);
    expect(book.shouldFail('hibernate.push', 'vk-a-b-0')).toBe(false);
    expect(book.list()).toEqual([]);
  });

  it('keeps an uncounted rule until cleared', () => {
    const book = new FaultBook();
    book.add({ op: 'delete.push.fail' });
    for (let i = 0; i < 5; i++) expect(book.shouldFail('delete.push', 'x')).toBe(true);
    book.clear();
    expect(book.shouldFail('delete.push', 'x')).toBe(false);
  });

  it('matches the VM regex and the mode', () => {
    const book = new FaultBook();
    book.add({ vm: '-0$', op: 'create.fail' });
    book.add({ vm: '^vk-ns-', op: 'create.delay', delayMs: 25 });
    expect(book.shouldFail('create', 'vk-ns-demo-1')).toBe(false);
    expect(book.shouldFail('create', 'vk-ns-demo-0')).toBe(true);
    expect(book.delayFor('create', 'vk-ns-demo-1')).toBe(25);
    expect(book.delayFor('create', 'vk-other-demo-1')).toBe(0);
    expect(book.shouldFail('wake.pull', 'vk-ns-demo-0')).toBe(false);
  });

  it('uses the first matching rule in insertion order', () => {
    const book = new FaultBook();
    book.add({ op: 'ready.delay', delayMs: 10, count: 1 });
    book.add({ op: 'ready.delay', delayMs: 99 });
    expect(book.delayFor('ready', 'v')).toBe(10);
    expect(book.delayFor('ready', 'v')).toBe(99);
    expect(book.delayFor('ready', 'v')).toBe(99);
  });
});

describe('crashTargets', () => {
  it('selects matching VMs, at most count of them', () => {
    const vms = ['vk-a-x-1', 'vk-a-x-0', 'vk-b-y-0'];
    expect(crashTargets({ vm: '^vk-a-', remaining: undefined }, vms)).toEqual(['vk-a-x-0', 'vk-a-x-1']);
    expect(crashTargets({ vm: '-0$', remaining: 1 }, vms)).toEqual(['vk-a-x-0']);
    expect(crashTargets({ vm: undefined, remaining: undefined }, vms)).toHaveLength(3);
  });
});
