/**
 * A statechart state value as one line: `working.routing`, `ready.busy`, `input-required`; parallel
 * regions joined with commas. No imports: the CLI, the inspection stream and the studio's browser bundle
 * all use this one.
 */
export function stateLabel(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object') {
    return Object.entries(value)
      .map(([k, v]) => {
        const inner = stateLabel(v);
        return inner ? `${k}.${inner}` : k;
      })
      .join(',');
  }
  return value === undefined || value === null ? '' : String(value);
}
