/**
 * What a vectorstore search gives back — to the model as its tool result, to `troupe eval` as the
 * context an answer should be grounded in, and to code that calls an index: always this one shape.
 */
import { z } from 'zod';

export const SearchResultSchema = z.object({
  /** The chunk of the source that matched. */
  matched_content: z.string(),
  /** The record's meta_fields (or, without meta_fields, its other fields; a markdown chunk's heading). */
  metadata_dict: z.record(z.string(), z.unknown()),
  /** Where it comes from: the file (relative to the agent.yaml) and the record or chunk, e.g. `faq.json#data.records[3]`. */
  source_reference: z.string(),
  /** 0–1: the cosine similarity of the query and the chunk, clamped at 0. */
  relevance_score: z.number().min(0).max(1),
});
export type SearchResult = z.infer<typeof SearchResultSchema>;
