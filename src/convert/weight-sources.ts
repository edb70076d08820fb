// Where the builder's weights come from: a Hugging Face safetensors checkpoint
// (single file or sharded), or seeded random numbers in the same shapes.
import fs from 'node:fs'
import path from 'node:path'
import type { DecoderConfig } from './decoder-config.ts'
import type { WeightSource } from './decoder-graph.ts'
import { SafetensorsFile } from './safetensors.ts'
import type { Tensor } from './tensors.ts'

/** The shape every weight of a decoder must have, by Hugging Face name. */
export function expectedShapes (cfg: DecoderConfig): Map<string, number[]> {
  const { hiddenSize: H, numHeads: nH, numKvHeads: nKv, headDim: hd, intermediateSize: I, vocabSize: V } = cfg
  const shapes = new Map<string, number[]>()
  shapes.set('model.embed_tokens.weight', [V, H])
  shapes.set('model.norm.weight', [H])
  if (!cfg.tieWordEmbeddings) shapes.set('lm_head.weight', [V, H])
  for (let i = 0; i < cfg.numLayers; i++) {
    const p = `model.layers.${i}`
    shapes.set(`${p}.input_layernorm.weight`, [H])
    shapes.set(`${p}.post_attention_layernorm.weight`, [H])
    shapes.set(`${p}.self_attn.q_proj.weight`, [nH * hd, H])
    shapes.set(`${p}.self_attn.k_proj.weight`, [nKv * hd, H])
    shapes.set(`${p}.self_attn.v_proj.weight`, [nKv * hd, H])
    shapes.set(`${p}.self_attn.o_proj.weight`, [H, nH * hd])
    if (cfg.qkvBias) {
      shapes.set(`${p}.self_attn.q_proj.bias`, [nH * hd])
      shapes.set(`${p}.self_attn.k_proj.bias`, [nKv * hd])
      shapes.set(`${p}.self_attn.v_proj.bias`, [nKv * hd])
    }
    if (cfg.oBias) shapes.set(`${p}.self_attn.o_proj.bias`, [H])
    shapes.set(`${p}.mlp.gate_proj.weight`, [I, H])
    shapes.set(`${p}.mlp.up_proj.weight`, [I, H])
    shapes.set(`${p}.mlp.down_proj.weight`, [H, I])
    if (cfg.mlpBias) {
      shapes.set(`${p}.mlp.gate_proj.bias`, [I])
      shapes.set(`${p}.mlp.up_proj.bias`, [I])
      shapes.set(`${p}.mlp.down_proj.bias`, [H])
    }
  }
  return shapes
}

/** Reads a checkpoint directory: model.safetensors or model.safetensors.index.json shards. */
export class CheckpointWeights implements WeightSource {
  readonly #files: SafetensorsFile[] = []
  readonly #byName = new Map<string, SafetensorsFile>()
  readonly #shapes: Map<string, number[]>

  constructor (dir: string, cfg: DecoderConfig) {
    this.#shapes = expectedShapes(cfg)
    const single = path.join(dir, 'model.safetensors')
    const index = path.join(dir, 'model.safetensors.index.json')
    let fileNames: string[]
    if (fs.existsSync(index)) {
      const map = JSON.parse(fs.readFileSync(index, 'utf8')).weight_map as Record<string, string>
      fileNames = [...new Set(Object.values(map))]
    } else if (fs.existsSync(single)) {
      fileNames = ['model.safetensors']
    } else {
      throw new Error(`${dir}: no model.safetensors or model.safetensors.index.json`)
    }
    for (const name of fileNames) {
      const file = new SafetensorsFile(path.join(dir, name))
      this.#files.push(file)
      for (const tensor of file.names()) this.#byName.set(tensor, file)
    }
    for (const [name, shape] of this.#shapes) {
      const file = this.#byName.get(name)
      if (!file) throw new Error(`${dir}: checkpoint lacks tensor ${name}`)
      const actual = file.shape(name)
      if (actual.join(',') !== shape.join(',')) {
        throw new Error(`${file.path}: tensor ${name} has shape [${actual}], config.json implies [${shape}]`)
      }
    }
  }

  has (name: string): boolean {
    return this.#byName.has(name)
  }

  get (name: string): Tensor {
    const file = this.#byName.get(name)
    if (!file) throw new Error(`checkpoint lacks tensor ${name}`)
    return file.read(name)
  }

  close (): void {
    for (const f of this.#files) f.close()
  }
}

/**
 * Seeded random weights: each tensor draws from its own generator seeded by
 * (seed, tensor name), so the same seed gives the same weights whatever the
 * storage format or the order tensors are asked for.
 */
export class RandomWeights implements WeightSource {
  readonly #shapes: Map<string, number[]>
  readonly #seed: number
  readonly #std: number

  constructor (cfg: DecoderConfig, seed: number, std = 0.02) {
    this.#shapes = expectedShapes(cfg)
    this.#seed = seed
    this.#std = std
  }

  has (name: string): boolean {
    return this.#shapes.has(name)
  }

  get (name: string): Tensor {
    const shape = this.#shapes.get(name)
    if (!shape) throw new Error(`random model has no tensor ${name}`)
    const count = shape.reduce((a, b) => a * b, 1)
    const data = new Float32Array(count)
    const next = mulberry32(hashString(name) ^ this.#seed)
    if (name.endsWith('norm.weight')) {
      // Norm gains near one, as in a trained model.
      for (let i = 0; i < count; i++) data[i] = 1 + (next() - 0.5) * 0.2
    } else {
      // Uniform with the requested standard deviation: half-width std * sqrt(3).
      const width = 2 * this.#std * Math.sqrt(3)
      for (let i = 0; i < count; i++) data[i] = (next() - 0.5) * width
    }
    return { shape, data }
  }
}

/** mulberry32: a tiny, fast 32-bit PRNG; plenty for test weights. */
function mulberry32 (seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** FNV-1a over UTF-16 code units. */
function hashString (s: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}
