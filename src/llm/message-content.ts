/**
 * What a YAML agent's model sees of an A2A message: its text, and its attachments — an image (file part
 * with bytes and an image/* type) as an image the model looks at, a text-like file (text/*, csv, json,
 * markdown) as its text under a `[file …]` line, a file by URI or of another type as a line saying what
 * it is, a data part as JSON. A message of text parts only stays plain text.
 */
import type { Message } from '../protocol/a2a.js';
import type { UserContentPart } from '../model/types.js';

/** The image types both providers accept. */
const IMAGE_TYPES = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);
const TEXT_TYPES = /^(?:text\/|application\/(?:json|csv|x-ndjson|xml|yaml)\b)/;
const TEXT_NAMES = /\.(?:txt|md|csv|tsv|json|jsonl|xml|ya?ml)$/i;

function label(file: { name?: string; mimeType?: string }, extra = ''): string {
  const parts = [file.name, file.mimeType].filter(Boolean).join(', ');
  return `[file${parts ? ` ${parts}` : ''}${extra}]`;
}

export function userContent(message: Message, text: string): string | UserContentPart[] {
  if (message.parts.every((p) => p.kind === 'text')) return text;
  const out: UserContentPart[] = [];
  for (const part of message.parts) {
    if (part.kind === 'text') out.push({ type: 'text', text: part.text });
    else if (part.kind === 'data') out.push({ type: 'text', text: JSON.stringify(part.data) });
    else if ('uri' in part.file) out.push({ type: 'text', text: `${label(part.file)} at ${part.file.uri}` });
    else {
      const { bytes, mimeType = '' } = part.file;
      if (IMAGE_TYPES.has(mimeType)) out.push({ type: 'image', mimeType, data: bytes });
      else if (TEXT_TYPES.test(mimeType) || (!mimeType && TEXT_NAMES.test(part.file.name ?? ''))) {
        out.push({ type: 'text', text: `${label(part.file)}\n${Buffer.from(bytes, 'base64').toString('utf8')}` });
      } else out.push({ type: 'text', text: label(part.file, `, ${Math.floor((bytes.length * 3) / 4)} bytes this agent cannot read`) });
    }
  }
  return out;
}
