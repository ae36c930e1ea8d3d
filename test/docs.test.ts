import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The README and docs/ as a user reads them, from the installed package: every file they point
// to is shipped (package.json `files`), every #anchor exists, and they speak to users, without
// the project's internal history (issue numbers, commit hashes, "this round").

const root = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { files: string[] };
const docs = [
  'README.md',
  'CHANGELOG.md',
  ...readdirSync(join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function anchors(file: string): Set<string> {
  const text = readFileSync(join(root, file), 'utf8').replace(/```[\s\S]*?```/g, '');
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const [, heading] of text.matchAll(/^#{1,6} (.+)$/gm)) {
    const base = slug(heading as string);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

const shipped = (path: string) =>
  pkg.files.some((entry) => path === entry || path.startsWith(`${entry}/`)) ||
  /^(LICENSE|package\.json)$/.test(path);

describe('README and docs/', () => {
  it.each(docs)('%s: every link leads to a shipped file and an existing anchor', (file) => {
    expect(shipped(file)).toBe(true);
    const text = readFileSync(join(root, file), 'utf8').replace(/```[\s\S]*?```/g, '');
    const broken: string[] = [];
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target as string)) continue;
      const [path, anchor] = (target as string).split('#') as [string, string | undefined];
      const resolved = path === '' ? file : relative(root, normalize(join(root, dirname(file), path)));
      if (!existsSync(join(root, resolved)) || !shipped(resolved))
        broken.push(`${target}: not in the package`);
      else if (anchor !== undefined && resolved.endsWith('.md') && !anchors(resolved).has(anchor)) {
        broken.push(`${target}: no such heading`);
      }
    }
    expect(broken).toEqual([]);
  });

  it.each(docs.filter((f) => f !== 'CHANGELOG.md'))(
    '%s speaks to users, without internal history',
    (file) => {
      const text = readFileSync(join(root, file), 'utf8');
      const words = [
        /\bthis round\b/i,
        /\bthe (last|next) round\b/i,
        /\bissues? \d+/i,
        /\b(the )?seed's\b/i,
        /\bcommit `?[0-9a-f]{7,40}\b/i,
        /\b(after|before) the merge\b/i,
        /\bthis release\b/i,
        /\bearlier builds?\b/i,
        /\bthe issue('s)?\b/i,
      ];
      const found = words.flatMap((w) => text.match(new RegExp(w, 'gi')) ?? []);
      expect(found).toEqual([]);
    },
  );

  // The contributors' pages (the layers, the benches) name the repository's files; the others
  // do not send a user to files the package does not have.
  it.each(docs.filter((f) => !['CHANGELOG.md', 'docs/architecture.md', 'docs/bench.md'].includes(f)))(
    '%s names no test or bench file',
    (file) => {
      const text = readFileSync(join(root, file), 'utf8');
      expect(text.match(/\b(test|bench)\/[\w./-]+\.[cm]?[jt]s\b/g) ?? []).toEqual([]);
    },
  );

  it('the README stays short: at most 450 lines', () => {
    expect(readFileSync(join(root, 'README.md'), 'utf8').split('\n').length).toBeLessThanOrEqual(450);
  });
});
