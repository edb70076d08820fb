// language, tone and wordcount -> the one short instruction the model is given.
// Each non-default control adds one sentence, in a fixed order (language, tone,
// length); defaults add nothing, so a request without controls reaches the
// model exactly as the client sent it. Values that name nothing usable are
// refused with 400 naming the field, never silently ignored.

import { invalidParam } from '../errors.ts'
import { resolveLanguage } from './languages.ts'
import { TONES, resolveTone } from './tones.ts'

export interface Controls {
  language?: string
  tone?: string
  wordcount?: 'Default' | number
}

/** The instruction for these controls: '' when all are at their defaults. Throws invalid_parameter naming the field. */
export function controlInstruction (controls: Controls): string {
  const sentences: string[] = []

  if (controls.language !== undefined) {
    const language = resolveLanguage(controls.language)
    if (language === undefined) {
      throw invalidParam('language', `Unknown language ${JSON.stringify(controls.language)}: give its English name (such as "French") or its ISO 639-1 code (such as "fr").`)
    }
    if (language !== 'English') sentences.push(`Answer in ${language}.`)
  }

  if (controls.tone !== undefined) {
    const tone = resolveTone(controls.tone)
    if (tone === undefined) {
      throw invalidParam('tone', `Unknown tone ${JSON.stringify(controls.tone)}; one of: ${Object.keys(TONES).join(', ')}.`)
    }
    if (TONES[tone] !== '') sentences.push(TONES[tone])
  }

  if (typeof controls.wordcount === 'number') {
    sentences.push(`Keep the answer to about ${controls.wordcount} ${controls.wordcount === 1 ? 'word' : 'words'}.`)
  }

  return sentences.join(' ')
}
