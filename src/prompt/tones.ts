// The tones `tone` may name, each with the sentence the model is given. docs/api.md
// lists the same table; a name is matched in any letter case. "Default" asks
// for nothing and adds no instruction.

export const TONES = {
  Default: '',
  Formal: 'Write in a formal tone, without slang or contractions.',
  Professional: 'Write in a professional, businesslike tone.',
  Casual: 'Write in a casual, conversational tone.',
  Friendly: 'Write in a warm, friendly tone.',
  Academic: 'Write in an academic tone: precise, objective and well structured.',
  Technical: 'Write in a technical tone: exact terms and details, no filler.',
  Simple: 'Write in plain, simple words that a beginner can follow.',
  Humorous: 'Write in a light, humorous tone.',
  Persuasive: 'Write in a persuasive tone that argues for the answer.',
  Empathetic: 'Write in an empathetic, supportive tone.',
  Enthusiastic: 'Write in an enthusiastic, upbeat tone.',
  Neutral: 'Write in a neutral, matter-of-fact tone.',
} as const satisfies Record<string, string>

export type Tone = keyof typeof TONES

const BY_LOWER_NAME = new Map(Object.keys(TONES).map(name => [name.toLowerCase(), name as Tone]))

/** The tone `value` names, or undefined when it names none of TONES. */
export function resolveTone (value: string): Tone | undefined {
  return BY_LOWER_NAME.get(value.trim().toLowerCase())
}
