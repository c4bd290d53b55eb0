// Reading a Prometheus text answer in tests.

/** A series as `name{label="value",...}` with its labels sorted: the exposition format leaves their order free. */
function canonical(series: string): string {
  const open = series.indexOf('{');
  if (open < 0) return series;
  const labels = series.slice(open + 1, -1).match(/[a-zA-Z_]\w*="(?:[^"\\]|\\.)*"/g) ?? [];
  return `${series.slice(0, open)}{${[...labels].sort().join(',')}}`;
}

/** The value of the one sample `name{labels}` (labels in any order), or undefined. */
export function sample(text: string, series: string): number | undefined {
  const wanted = canonical(series);
  for (const line of text.split('\n')) {
    const cut = line.lastIndexOf(' ');
    if (cut > 0 && !line.startsWith('#') && canonical(line.slice(0, cut)) === wanted) return Number(line.slice(cut + 1));
  }
  return undefined;
}
