// A call's arguments as a reply carries them: the JSON text of one object.

/** A JSON text that parses to an object, re-serialized compactly; undefined otherwise. */
export function argumentsText (text: string): string | undefined {
  try {
    const value: unknown = JSON.parse(text)
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? JSON.stringify(value) : undefined
  } catch {
    return undefined
  }
}
