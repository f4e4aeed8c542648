/** The README's configuration table is generated from src/config.ts and must match it exactly. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { configTable } from '../../scripts/config-table.js';

describe('README', () => {
  it('holds the configuration table generated from ENV_SETTINGS', () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const m = readme.match(/<!-- config-table:start[^>]*-->\n([\s\S]*?)\n<!-- config-table:end -->/);
    expect(m, 'config-table markers missing from README.md').not.toBeNull();
    expect(m![1]).toBe(configTable());
  });
});
