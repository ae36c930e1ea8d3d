import {
  AggregationTemporality,
  type DataPoint,
  InMemoryMetricExporter,
  MeterProvider,
  type MetricData,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { METER_NAME } from '../../src/otel/index.js';

/** A MeterProvider whose metrics are read on demand (cumulative, as Prometheus reads them). */
export function otelHarness(temporality = AggregationTemporality.CUMULATIVE) {
  const exporter = new InMemoryMetricExporter(temporality);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
  const provider = new MeterProvider({ readers: [reader] });
  async function collect(): Promise<Map<string, MetricData>> {
    exporter.reset();
    await reader.forceFlush();
    const batches = exporter.getMetrics();
    const last = batches[batches.length - 1];
    const scope = last?.scopeMetrics.find((s) => s.scope.name === METER_NAME);
    return new Map((scope?.metrics ?? []).map((m) => [m.descriptor.name, m]));
  }
  return { exporter, reader, provider, collect };
}

export type Attrs = Record<string, unknown>;

export function points(all: Map<string, MetricData>, name: string, match: Attrs = {}): DataPoint<unknown>[] {
  const metric = all.get(name);
  return (metric?.dataPoints ?? []).filter((p: DataPoint<unknown>) =>
    Object.entries(match).every(([k, v]) => p.attributes[k] === v),
  ) as DataPoint<unknown>[];
}

export function sum(all: Map<string, MetricData>, name: string, match: Attrs = {}): number {
  return points(all, name, match).reduce((total, p) => total + (p.value as number), 0);
}
