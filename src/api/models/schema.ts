import { Type, type Static } from 'typebox'

export const Model = Type.Object({
  id: Type.String(),
  object: Type.Literal('model'),
  created: Type.Integer({ description: 'Unix seconds; when this server registered the model.' }),
  owned_by: Type.String(),
  status: Type.Enum(['ready', 'loading', 'unavailable'], { description: 'chatd extra: whether the model can answer now.' }),
  status_reason: Type.Optional(Type.String({ description: 'chatd extra: why the model is unavailable, in short; for an admin account, with the server\'s details (where the files should be, the command that fixes it).' })),
  context_length: Type.Optional(Type.Integer({ description: 'chatd extra: the most tokens (prompt plus reply) one request may use, once the model has loaded (local models) or when models.json gives it (upstream).' })),
  device: Type.Optional(Type.Enum(['cpu', 'cuda', 'webgpu'], { description: 'chatd extra, admin accounts only: the execution provider a local model runs on, once loaded (ONNX_DEVICE or the models.json entry\'s `device`; `auto` says what it found).' })),
  device_reason: Type.Optional(Type.String({ description: 'chatd extra, admin accounts only: why the model runs on `device` (asked for by name, or what `auto` found on this machine).' })),
  cache_on_device: Type.Optional(Type.Boolean({ description: 'chatd extra, admin accounts only: whether the model\'s KV cache stays in the GPU\'s memory between steps (WebGPU with a concat graph).' })),
  allowed: Type.Boolean({ description: 'chatd extra: whether the caller\'s tier may use the model; false: its requests get 403 model_not_allowed.' }),
})

export type Model = Static<typeof Model>

export const ModelList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(Model),
})

export const ModelParams = Type.Object({
  id: Type.String({ description: 'Model id; ids containing / are URL-encoded.' }),
})
