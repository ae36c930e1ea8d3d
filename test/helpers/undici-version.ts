import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

/** The major version of the undici the tests run against (7 by default; 8 in CI's matrix). */
export const undiciMajor = Number(
  (
    JSON.parse(readFileSync(createRequire(import.meta.url).resolve('undici/package.json'), 'utf8')) as {
      version: string;
    }
  ).version.split('.')[0],
);
