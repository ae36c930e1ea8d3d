import type { z } from 'zod';

type RawIssue = z.core.$ZodRawIssue;

/**
 * A zod issue in the library's words (`must be an integer >= 1`), in the style of the controllers'
 * checks: given as the error map of each parse (`schema.safeParse(input, { error: issueMessage })`),
 * so that zod asks it only for the issues whose schema sets no message of its own (a message a
 * schema sets, a refinement's, is kept as it is). Never set as zod's global map (`z.config`): that
 * would change the messages of the user's own schemas.
 */
export function issueMessage(issue: RawIssue): string {
  switch (issue.code) {
    case 'invalid_type':
      return typeMessage(issue);
    case 'too_small':
    case 'too_big':
      return boundMessage(issue);
    case 'invalid_value':
      return `must be ${anyOf(issue.values.map(literal))}`;
    case 'invalid_format':
      return formatMessage(issue);
    case 'not_multiple_of':
      return `must be a multiple of ${issue.divisor}`;
    case 'invalid_union':
      return unionMessage(issue);
    case 'invalid_key':
      return `a key ${issue.issues[0]?.message ?? 'is not valid'}`;
    case 'invalid_element':
      return `an element ${issue.issues[0]?.message ?? 'is not valid'}`;
    case 'unrecognized_keys':
      return `unknown key${issue.keys.length > 1 ? 's' : ''}: ${issue.keys.map((k) => JSON.stringify(k)).join(', ')}`;
    default:
      // A refinement with no message of its own: there is nothing more to say.
      return 'is not valid';
  }
}

/** What an `invalid_type` expected, as a noun: `a string`; numbers with their range. */
const TYPES: Readonly<Record<string, string>> = {
  string: 'a string',
  boolean: 'true or false',
  bigint: 'a bigint',
  symbol: 'a symbol',
  null: 'null',
  undefined: 'left out',
  void: 'left out',
  never: 'left out',
  date: 'a valid Date',
  array: 'an array',
  tuple: 'an array',
  object: 'an object',
  record: 'an object',
  map: 'a Map',
  set: 'a Set',
  file: 'a File',
  function: 'a function',
  promise: 'a Promise',
  nan: 'NaN',
};

function typeMessage(issue: Extract<RawIssue, { code: 'invalid_type' }>): string {
  if (issue.expected === 'nonoptional') return 'is required';
  let noun: string;
  if (issue.expected === 'number' || issue.expected === 'int') {
    const range = numberRange(issue.schema);
    noun = rangeText({ ...range, int: range.int || issue.expected === 'int' });
  } else {
    // A class (`z.instanceof(URL)`) is expected by its name.
    noun = TYPES[issue.expected] ?? `an instance of ${issue.expected}`;
  }
  // A field that must be given and was not.
  return issue.input === undefined && noun !== 'left out' ? `is required: ${noun}` : `must be ${noun}`;
}

interface Bound {
  value: number | bigint;
  inclusive: boolean;
}

interface NumberRange {
  int: boolean;
  lower?: Bound;
  upper?: Bound;
}

/** The range a number schema's checks allow (`z.number().int().gt(0)`): its integer rule and bounds. */
function numberRange(schema: unknown): NumberRange {
  type CheckDef = { check?: string; value?: unknown; inclusive?: boolean; format?: string };
  const def = (schema as { _zod?: { def?: { type?: string; checks?: unknown[] } } } | undefined)?._zod?.def;
  const range: NumberRange = { int: false };
  if (def?.type !== 'number' && def?.type !== 'bigint') return range;
  for (const check of def.checks ?? []) {
    const c = (check as { _zod?: { def?: CheckDef } })._zod?.def;
    const value = c?.value;
    if (c?.check === 'number_format') range.int ||= c.format !== 'float32' && c.format !== 'float64';
    if (typeof value !== 'number' && typeof value !== 'bigint') continue;
    const bound = { value, inclusive: c?.inclusive === true };
    // The tightest bound on each side.
    if (c?.check === 'greater_than' && (range.lower === undefined || value >= range.lower.value))
      range.lower = bound;
    if (c?.check === 'less_than' && (range.upper === undefined || value <= range.upper.value))
      range.upper = bound;
  }
  return range;
}

/** `an integer >= 0 and <= 10`, `a number > 0 and < 1`; `a finite number` when not bounded above (no Infinity). */
function rangeText(range: NumberRange): string {
  const kind = range.int ? 'an integer' : range.upper === undefined ? 'a finite number' : 'a number';
  const lower = range.lower && ` ${range.lower.inclusive ? '>=' : '>'} ${numberText(range.lower.value)}`;
  const upper = range.upper && ` ${range.upper.inclusive ? '<=' : '<'} ${numberText(range.upper.value)}`;
  return `${kind}${lower ?? ''}${lower && upper ? ' and' : ''}${upper ?? ''}`;
}

/** A bound as written: zod's safe-integer rule by its name too. */
function numberText(value: number | bigint): string {
  if (value === Number.MAX_SAFE_INTEGER) return `${value} (Number.MAX_SAFE_INTEGER)`;
  if (value === Number.MIN_SAFE_INTEGER) return `${value} (Number.MIN_SAFE_INTEGER)`;
  return typeof value === 'bigint' ? `${value}n` : String(value);
}

/** What a size is counted in, by the `origin` of a `too_small` or `too_big`. */
const SIZED: Readonly<Record<string, readonly [noun: string, unit: string]>> = {
  string: ['a string', 'characters'],
  array: ['an array', 'items'],
  set: ['a Set', 'items'],
  map: ['a Map', 'entries'],
  file: ['a File', 'bytes'],
};

function boundMessage(issue: Extract<RawIssue, { code: 'too_small' | 'too_big' }>): string {
  const small = issue.code === 'too_small';
  const limit = small ? issue.minimum : issue.maximum;
  const inclusive = issue.inclusive === true;
  const sized = SIZED[issue.origin];
  if (sized !== undefined) {
    const [noun, unit] = sized;
    // Sizes are whole: `> 0` is `at least 1`.
    const n = Number(limit) + (inclusive || issue.exact ? 0 : small ? 1 : -1);
    if (issue.exact) return `must be ${noun} of exactly ${n} ${unit}`;
    if (small && n === 1) return `must be ${noun.replace(/^an? /, 'a non-empty ')}`;
    return `must be ${noun} of ${small ? 'at least' : 'at most'} ${n} ${unit}`;
  }
  if (issue.exact) return `must be exactly ${numberText(limit)}`;
  if (issue.origin === 'date') {
    const at = new Date(Number(limit)).toISOString();
    return `must be a date ${small ? (inclusive ? '>=' : '>') : inclusive ? '<=' : '<'} ${at}`;
  }
  // A number: its whole range, with the bound it broke (the safe-integer bound of `.int()`).
  const range = numberRange(issue.schema);
  const bound = { value: limit, inclusive };
  return `must be ${rangeText({
    int: range.int || issue.origin === 'int',
    lower: small ? bound : range.lower,
    upper: small ? range.upper : bound,
  })}`;
}

const FORMATS: Readonly<Record<string, string>> = {
  email: 'an email address',
  url: 'a URL',
  uuid: 'a UUID',
  guid: 'a GUID',
  datetime: 'an ISO 8601 date and time',
  date: 'an ISO 8601 date',
  time: 'an ISO 8601 time',
  duration: 'an ISO 8601 duration',
  ipv4: 'an IPv4 address',
  ipv6: 'an IPv6 address',
  cidrv4: 'an IPv4 range',
  cidrv6: 'an IPv6 range',
  base64: 'base64 text',
  base64url: 'base64url text',
  json_string: 'a JSON string',
  jwt: 'a JWT',
};

function formatMessage(issue: Extract<RawIssue, { code: 'invalid_format' }>): string {
  const text = (key: string) => JSON.stringify(String(issue[key]));
  switch (issue.format) {
    case 'regex':
      return `must match ${issue.pattern}`;
    case 'starts_with':
      return `must start with ${text('prefix')}`;
    case 'ends_with':
      return `must end with ${text('suffix')}`;
    case 'includes':
      return `must contain ${text('includes')}`;
    default:
      return `must be ${FORMATS[issue.format] ?? `a valid ${issue.format}`}`;
  }
}

/**
 * A union no member took: its members, when each says what it takes (`must be a string or an
 * instance of URL`), else what its first member says.
 */
function unionMessage(issue: Extract<RawIssue, { code: 'invalid_union' }>): string {
  if (issue.inclusive === false) return 'must match one of its forms, not several';
  if (issue.options !== undefined && issue.options.length > 0) {
    return `must have ${issue.discriminator ?? 'its discriminator'} ${anyOf(issue.options.map(literal))}`;
  }
  const firsts = issue.errors.map((branch) => branch[0]);
  const members = firsts.map((first) =>
    first !== undefined && first.path.length === 0 && first.message.startsWith('must be ')
      ? first.message.slice('must be '.length)
      : undefined,
  );
  if (members.length > 0 && members.every((m) => m !== undefined)) {
    return `must be ${orList([...new Set(members as string[])])}`;
  }
  return firsts.find((first) => first !== undefined)?.message ?? 'is not valid';
}

/** `'a'`, `'a' or 'b'`, `one of 'a', 'b', 'c'`. */
function anyOf(values: readonly string[]): string {
  return values.length > 2 ? `one of ${values.join(', ')}` : orList(values);
}

function orList(items: readonly string[]): string {
  return items.length < 2 ? (items[0] ?? '') : `${items.slice(0, -1).join(', ')} or ${items.at(-1)}`;
}

/** A literal value as the messages write it: strings in single quotes, bigints with `n`. */
function literal(value: unknown): string {
  if (typeof value === 'string') return `'${value}'`;
  if (typeof value === 'bigint') return `${value}n`;
  return String(value);
}
