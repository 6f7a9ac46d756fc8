// The Prometheus text format, the parts the demo's summary and the benches need.
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Prometheus text format, the parts the summary needs (no escapes in label values). */
export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const pair of (m[2] ?? "").matchAll(/(\w+)="([^"]*)"/g)) labels[pair[1] as string] = pair[2] as string;
    samples.push({ name: m[1] as string, labels, value: Number(m[3]) });
  }
  return samples;
}

export const total = (samples: Sample[], name: string) => samples.filter((s) => s.name === name).reduce((sum, s) => sum + s.value, 0);

export function byLabel(samples: Sample[], name: string, label: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of samples) if (s.name === name && s.value > 0) out[s.labels[label] ?? ""] = (out[s.labels[label] ?? ""] ?? 0) + s.value;
  return out;
}
