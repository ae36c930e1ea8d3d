/**
 * The limiters' OpenTelemetry metrics, exported for Prometheus while calling a rate-limited API:
 * one import and one call (`enableMetrics()`) record every limiter of the process; the SDK's
 * Prometheus exporter serves them at /metrics. The example scrapes its own /metrics once at the
 * end and prints the lines a dashboard reads, then the PromQL queries of docs/metrics.md.
 *
 * In an application, set the global MeterProvider once (the OpenTelemetry Node SDK does) and call
 * `enableMetrics()` without arguments; here the provider is passed in.
 *
 *   node --import tsx examples/prometheus-metrics.ts
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { rateLimitedFetch } from '../src/index.js';
import { enableMetrics } from '../src/otel/index.js';
import { startServer } from './server.js';

// The exporter is a reader: Prometheus scrapes it. Served here on a port of our own (port 0), as
// an application would mount it next to its own routes; `new PrometheusExporter()` alone listens
// on :9464.
const exporter = new PrometheusExporter({ preventServerStart: true });
const meterProvider = new MeterProvider({ readers: [exporter] });
const metricsServer = createServer((req, res) => exporter.getMetricsRequestHandler(req, res));
metricsServer.listen(0, '127.0.0.1');
await once(metricsServer, 'listening');
const metricsUrl = `http://127.0.0.1:${(metricsServer.address() as AddressInfo).port}/metrics`;

const metrics = enableMetrics({ meterProvider });

const api = await startServer({ perMinute: 1200 });
const limitedFetch = rateLimitedFetch({ default: { maxWait: 10_000 } });
const statuses = await Promise.all(
  Array.from({ length: 60 }, async (_, i) => {
    const response = await limitedFetch(`${api.origin}/orders/${i}`);
    await response.body?.cancel();
    return response.status;
  }),
);
const ok = statuses.filter((s) => s === 200).length;
console.log(`prometheus example: ${ok} of ${statuses.length} requests answered 200`);
console.log(
  `server (quota ${api.perMinute}/min): saw ${api.stats.requests} requests, answered ${api.stats.throttled} with 429`,
);

// What Prometheus would scrape now: the limiter's lines (the histogram's buckets left out).
const scraped = await (await fetch(metricsUrl)).text();
const lines = scraped
  .split('\n')
  .filter((line) => line.startsWith('adaptive_rate_limit_') && !line.includes('_bucket{'));
console.log(`\n${metricsUrl} (adaptive_rate_limit_* series, buckets left out):`);
for (const line of lines) console.log(`  ${line}`);

console.log(`
Dashboard queries (docs/metrics.md says what each answers):
  how long do my calls queue, per origin (p95, seconds):
    histogram_quantile(0.95, sum by (server_address, le) (rate(adaptive_rate_limit_request_time_in_queue_bucket[5m])))
  how close is each origin to its quota (1 = at the quota its headers announce):
    adaptive_rate_limit_rate_accepted / adaptive_rate_limit_rate_announced
  the rate the limiter runs at, against what the server accepts:
    adaptive_rate_limit_rate_current, adaptive_rate_limit_rate_accepted
  share of requests that waited, or were refused:
    sum by (adaptive_rate_limit_result) (rate(adaptive_rate_limit_requests_total[5m]))
  429s and cuts per minute:
    60 * rate(adaptive_rate_limit_responses_total{adaptive_rate_limit_result="throttled"}[5m]), 60 * rate(adaptive_rate_limit_cuts_total[5m])`);

metrics.disable();
limitedFetch.close();
await api.close();
metricsServer.close();
await meterProvider.shutdown();
