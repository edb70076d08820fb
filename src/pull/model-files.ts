// Which files of a hub repository a local model needs: the config and
// tokenizer files, and the ONNX graph for the model's dtype with its external
// data (onnx-community publishes e.g. onnx/model_q4.onnx + onnx/model_q4.onnx_data,
// large graphs sometimes as model.onnx_data_1, _2...). Other dtypes' graphs, often
// gigabytes each, are left alone.

import { ONNX_FILES_BY_DTYPE, type ModelDtype } from '../engine/onnx/model-dir.ts'
import { PullError } from './errors.ts'
import type { RemoteFile } from './hub.ts'

const REQUIRED = ['config.json', 'tokenizer.json', 'tokenizer_config.json']
const OPTIONAL = ['generation_config.json', 'special_tokens_map.json']

export function selectModelFiles (listing: RemoteFile[], dtype: ModelDtype, repo: string): RemoteFile[] {
  const byPath = new Map(listing.map(f => [f.path, f]))
  const missing = REQUIRED.filter(p => !byPath.has(p))
  if (missing.length > 0) throw new PullError(`${repo} lacks ${missing.join(', ')}: it is not a model in the Hugging Face / onnx-community layout`)

  const candidates = ONNX_FILES_BY_DTYPE[dtype].map(f => `onnx/${f}`)
  const graph = candidates.find(p => byPath.has(p))
  if (graph === undefined) {
    const available = listing.filter(f => /^onnx\/[^/]+\.onnx$/.test(f.path)).map(f => f.path).sort()
    throw new PullError(`${repo} has no ${candidates.join(' or ')} for dtype ${dtype}; it has ${available.length > 0 ? available.join(', ') : 'no ONNX graphs'}`)
  }
  const externalData = listing.filter(f => f.path === `${graph}_data` || f.path === `${graph}.data` || f.path.startsWith(`${graph}_data_`))

  return [
    ...REQUIRED.map(p => byPath.get(p)!),
    ...OPTIONAL.flatMap(p => byPath.get(p) ?? []),
    byPath.get(graph)!,
    ...externalData.sort((a, b) => a.path.localeCompare(b.path, 'en', { numeric: true })),
  ]
}
