// Deno and Bun: `deno run main.mjs ORIGIN`, `bun main.mjs ORIGIN`; prints the report as JSON.
import { check } from './check.mjs';

const origin = (globalThis.Deno?.args ?? globalThis.process.argv.slice(2))[0];
console.log(JSON.stringify(await check(origin)));
