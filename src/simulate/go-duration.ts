/**
 * A duration as Go's `time.Duration.String()` writes it, to the millisecond (`0s`, `120ms`,
 * `1.5s`, `6m0s`, `1h0m0s`): the form OpenAI's `x-ratelimit-reset-*` fields take.
 */
export function goDuration(ms: number): string {
  const whole = Math.max(0, Math.round(ms));
  if (whole === 0) return '0s';
  if (whole < 1000) return `${whole}ms`;
  const hours = Math.floor(whole / 3_600_000);
  const minutes = Math.floor((whole % 3_600_000) / 60_000);
  const seconds = String((whole % 60_000) / 1000);
  if (hours > 0) return `${hours}h${minutes}m${seconds}s`;
  if (minutes > 0) return `${minutes}m${seconds}s`;
  return `${seconds}s`;
}
