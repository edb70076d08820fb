// The graph the WebGPU probe runs (webgpu-probe.ts): y = x + x over float[4],
// as chatd's graph writer writes it (a test rebuilds it and compares). Enough
// for WebGPU to pick an adapter, compile a shader and run it.
export const PROBE_MODEL = Buffer.from('CAgSBWNoYXRkGgExOkQKFwoBeAoBeBIBeRoFQWRkXzAiA0FkZDoAEgdkZWNvZGVyWg8KAXgSCgoICAESBAoCCARiDwoBeRIKCggIARIECgIIBEIECgAQEQ==', 'base64')
