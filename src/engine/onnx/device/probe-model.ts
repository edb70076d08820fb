// Graphs the engine runs beside a model's, kept as bytes (the runtime never imports the converter).

// The graph the WebGPU probe runs (webgpu-probe.ts): y = x + x over float[4],
// as chatd's graph writer writes it (a test rebuilds it and compares). Enough
// for WebGPU to pick an adapter, compile a shader and run it.
export const PROBE_MODEL = Buffer.from('CAgSBWNoYXRkGgExOkQKFwoBeAoBeBIBeRoFQWRkXzAiA0FkZDoAEgdkZWNvZGVyWg8KAXgSCgoICAESBAoCCARiDwoBeRIKCggIARIECgIIBEIECgAQEQ==', 'base64')

// The graph that makes a cache's GPU buffers (gpu-buffers.ts): padded = Pad(source, pads),
// constant zeros, source and padded float [rows, heads, held or room, dim], pads int64[8]; as
// chatd's graph writer writes it (the same test rebuilds it and compares).
export const PAD_MODEL = Buffer.from('CAgSBWNoYXRkGgExOrwBCjkKBnNvdXJjZQoEcGFkcxIGcGFkZGVkGgVQYWRfMCIDUGFkKhMKBG1vZGUiCGNvbnN0YW50oAEDOgASB2RlY29kZXJaMAoGc291cmNlEiYKJAgBEiAKBhIEcm93cwoHEgVoZWFkcwoGEgRoZWxkCgUSA2RpbVoSCgRwYWRzEgoKCAgHEgQKAggIYjAKBnBhZGRlZBImCiQIARIgCgYSBHJvd3MKBxIFaGVhZHMKBhIEcm9vbQoFEgNkaW1CBAoAEBE=', 'base64')
