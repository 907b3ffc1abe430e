/**
 * Prompt templates of `type: prompt` tools. Seed 002 writes placeholders Python's way, `{country}`;
 * Mustache's `{{country}}` is common too, so both mark where an argument goes:
 *
 *   "What is the capital of {country}?"        "What is the capital of {{ country }}?"
 *
 * A placeholder is a parameter name (a letter or `_`, then letters, digits, `_`) in one pair of braces
 * with nothing else inside, or in two pairs with optional spaces inside. Every other brace is text, so
 * JSON in a template stays as written (`{"city": "{city}"}` fills only `{city}`). `\{` and `\}` are a
 * literal `{` and `}` — for text that would otherwise read as a placeholder (`\{name}` stays `{name}`);
 * any other backslash is kept as it is.
 *
 * `troupe validate` reports a placeholder that is not a parameter (an error) and a parameter the
 * template never uses (a warning), each at its line and column.
 */

export type TemplateSegment =
  | { kind: 'text'; text: string }
  /** `raw` is the placeholder as written; `offset` where it starts in the template. */
  | { kind: 'placeholder'; name: string; raw: string; offset: number };

const DOUBLE = /\{\{[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*\}\}/y;
const SINGLE = /\{([A-Za-z_][A-Za-z0-9_]*)\}/y;

/** The template cut into text and placeholders, escapes resolved in the text. Linear in its length. */
export function parseTemplate(template: string): TemplateSegment[] {
  const out: TemplateSegment[] = [];
  let text = '';
  let i = 0;
  while (i < template.length) {
    const ch = template[i]!;
    if (ch === '\\' && (template[i + 1] === '{' || template[i + 1] === '}')) {
      text += template[i + 1];
      i += 2;
      continue;
    }
    if (ch === '{') {
      DOUBLE.lastIndex = i;
      SINGLE.lastIndex = i;
      const m = DOUBLE.exec(template) ?? SINGLE.exec(template);
      if (m) {
        if (text) out.push({ kind: 'text', text });
        text = '';
        out.push({ kind: 'placeholder', name: m[1]!, raw: m[0], offset: i });
        i += m[0].length;
        continue;
      }
    }
    text += ch;
    i++;
  }
  if (text) out.push({ kind: 'text', text });
  return out;
}

/** The placeholders of a template, in order (a name used twice is listed twice). */
export function templatePlaceholders(template: string): Array<Extract<TemplateSegment, { kind: 'placeholder' }>> {
  return parseTemplate(template).filter((s): s is Extract<TemplateSegment, { kind: 'placeholder' }> => s.kind === 'placeholder');
}

/** Fills the template: strings as they are, other values as JSON; a placeholder without an argument stays as written. */
export function renderTemplate(template: string, args: Record<string, unknown>): string {
  return parseTemplate(template)
    .map((s) => {
      if (s.kind === 'text') return s.text;
      if (!Object.prototype.hasOwnProperty.call(args, s.name)) return s.raw;
      const value = args[s.name];
      return typeof value === 'string' ? value : JSON.stringify(value);
    })
    .join('');
}

/** 1-based line and column of `offset` in `text`. */
export function lineColumn(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let start = 0;
  for (let i = text.indexOf('\n'); i !== -1 && i < offset; i = text.indexOf('\n', i + 1)) {
    line++;
    start = i + 1;
  }
  return { line, column: offset - start + 1 };
}
