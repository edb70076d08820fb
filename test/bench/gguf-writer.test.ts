// The llama.cpp comparison's own GGUF pieces, without building llama.cpp:
// Q4_0 blocks as ggml lays them out, and a small GGUF written and read back
// both by our reader and by an independent one (@huggingface/gguf).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { gguf as parseWithHf } from '@huggingface/gguf'
import t from 'tap'
import { gguf, type GgufMetadata } from '../../scripts/llama-cpp/gguf-format.ts'
import { readGguf, readGgufTensor } from '../../scripts/llama-cpp/gguf-reader.ts'
import { ggufHeader, type GgufTensorSpec, writeGguf } from '../../scripts/llama-cpp/gguf-writer.ts'
import { ggufTensorName } from '../../scripts/llama-cpp/model.ts'
import { dequantizeQ4_0, Q4_0_BLOCK_BYTES, QK4_0, quantizeQ4_0 } from '../../scripts/llama-cpp/q4-0.ts'

function seeded (seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = Math.imul(a ^ (a >>> 15), a | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

t.test('Q4_0: a hand-computed block has the bytes ggml expects', async t => {
  // Values -16..15: the extreme is -16, so d = -16 / -8 = 2 and code = min(15, trunc(x / 2 + 8.5)).
  const x = Float32Array.from({ length: 32 }, (_, j) => j - 16)
  const q = quantizeQ4_0(x)
  t.equal(q.length, Q4_0_BLOCK_BYTES)
  t.same([...q.subarray(0, 2)], [0x00, 0x40], 'scale 2.0 as little-endian fp16')
  for (let j = 0; j < 16; j++) {
    const lo = Math.trunc((j - 16) / 2 + 8.5)
    const hi = Math.min(15, Math.trunc(j / 2 + 8.5)) // 15 / 2 + 8.5 = 16 is clamped
    t.equal(q[2 + j], lo | (hi << 4), `byte ${j}: element ${j} low nibble, element ${j + 16} high nibble`)
  }
  t.same(Array.from(dequantizeQ4_0(q).subarray(0, 2)), [-16, -14], 'the extreme comes back exactly')
})

t.test('Q4_0: an all-zero block is scale -0 and code 8 everywhere', async t => {
  // The reference computes d = max / -8 with max = +0, which is -0 (fp16 0x8000).
  const q = quantizeQ4_0(new Float32Array(32))
  t.same([...q], [0x00, 0x80, ...new Array(16).fill(0x88)])
  t.ok(dequantizeQ4_0(q).every(v => v === 0))
})

t.test('Q4_0: round trip stays within one step of each block', async t => {
  const next = seeded(7)
  const blocks = 500
  const x = Float32Array.from({ length: blocks * QK4_0 }, () => (next() - 0.5) * 0.07)
  const back = dequantizeQ4_0(quantizeQ4_0(x))
  let worstRelative = 0
  let sumSq = 0
  for (let b = 0; b < blocks; b++) {
    const block = x.subarray(b * QK4_0, (b + 1) * QK4_0)
    const amax = Math.max(...block.map(Math.abs))
    const step = amax / 8
    for (let j = 0; j < QK4_0; j++) {
      const err = Math.abs(back[b * QK4_0 + j] - block[j])
      sumSq += err * err
      // Half a step from rounding, a whole step at the clamped top code; fp16 scale rounding on top.
      worstRelative = Math.max(worstRelative, err / step)
    }
  }
  t.ok(worstRelative <= 1.01, `worst error ${worstRelative.toFixed(3)} steps`)
  const rms = Math.sqrt(sumSq / x.length)
  t.ok(rms < 0.035 * 0.3, `rms error ${rms.toExponential(2)} is well under the values' spread`)
  t.throws(() => quantizeQ4_0(new Float32Array(31)), /multiple of 32/)
})

t.test('a small GGUF reads back with its metadata, tensor infos, alignment and data', async t => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'chatd-gguf-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const next = seeded(3)
  const norm = Float32Array.from({ length: 8 }, () => next())
  const half = new Float16Array(Array.from({ length: 32 * 3 }, () => next() - 0.5))
  const q4Values = Float32Array.from({ length: 64 * 2 }, () => next() - 0.5)
  const q4 = quantizeQ4_0(q4Values)
  const tensors: GgufTensorSpec[] = [
    { name: 'output_norm.weight', type: 'F32', dims: [8] },
    { name: 'blk.0.attn_k.weight', type: 'F16', dims: [32, 3] },
    { name: 'token_embd.weight', type: 'Q4_0', dims: [64, 2] },
  ]
  const data = [
    new Uint8Array(norm.buffer),
    new Uint8Array(half.buffer),
    q4,
  ]
  const metadata: GgufMetadata = [
    ['general.architecture', gguf.str('qwen2')],
    ['general.name', gguf.str('tiny ünïcode')],
    ['qwen2.block_count', gguf.u32(1)],
    ['qwen2.rope.freq_base', gguf.f32(10000)],
    ['qwen2.attention.layer_norm_rms_epsilon', gguf.f32(1e-6)],
    ['test.signed', gguf.i32(-5)],
    ['test.big', gguf.u64(2n ** 40n)],
    ['test.flag', gguf.bool(true)],
    ['tokenizer.ggml.tokens', gguf.arr('string', ['a', 'bb', ''])],
    ['tokenizer.ggml.scores', gguf.arr('f32', [0.5, -1])],
  ]

  for (const alignment of [32, 64]) {
    const file = path.join(dir, `tiny-${alignment}.gguf`)
    const layout = writeGguf(file, { metadata, tensors, alignment, data: (_t, i) => data[i] })
    t.equal(fs.statSync(file).size, layout.fileBytes, 'file size is the layout size')
    t.equal(fs.existsSync(`${file}.partial`), false, 'no temporary file left behind')

    const g = readGguf(file)
    t.equal(g.version, 3)
    t.equal(g.alignment, alignment)
    t.equal(g.dataOffset, layout.dataOffset)
    t.equal(g.dataOffset % alignment, 0, 'data blob is aligned')
    t.equal(g.metadata.get('general.architecture'), 'qwen2')
    t.equal(g.metadata.get('general.name'), 'tiny ünïcode')
    t.equal(g.metadata.get('qwen2.block_count'), 1)
    t.equal(g.metadata.get('qwen2.rope.freq_base'), 10000)
    t.equal(g.metadata.get('qwen2.attention.layer_norm_rms_epsilon'), Math.fround(1e-6))
    t.equal(g.metadata.get('test.signed'), -5)
    t.equal(g.metadata.get('test.big'), 2n ** 40n)
    t.equal(g.metadata.get('test.flag'), true)
    t.same(g.metadata.get('tokenizer.ggml.tokens'), ['a', 'bb', ''])
    t.same(g.metadata.get('tokenizer.ggml.scores'), [0.5, -1])
    t.equal(g.metadata.has('general.alignment'), alignment !== 32, 'general.alignment written only when not the default')
    t.same(g.tensors.map(x => [x.name, x.type, x.dims]), tensors.map(x => [x.name, x.type, x.dims]))
    // Each tensor starts where the previous one ends, rounded up to the alignment.
    let expected = 0
    g.tensors.forEach((info, i) => {
      t.equal(info.offset, expected, `${info.name} offset`)
      t.equal(info.offset % alignment, 0)
      t.equal(info.size, data[i].length)
      expected += Math.ceil(data[i].length / alignment) * alignment
    })
    t.equal(g.dataOffset + expected, fs.statSync(file).size, 'the last tensor is padded too')
    for (const [i, spec] of tensors.entries()) t.same(readGgufTensor(file, g, spec.name).bytes, data[i], `${spec.name} bytes`)
    const q4Back = dequantizeQ4_0(readGgufTensor(file, g, 'token_embd.weight').bytes)
    t.ok(q4Back.every((v, i) => Math.abs(v - q4Values[i]) <= 0.5 / 8 * 1.01), 'Q4_0 tensor dequantizes near its values')

    // An independent reader sees the same file.
    const hf = await parseWithHf(file, { allowLocalFile: true })
    t.equal(Number(hf.tensorDataOffset), g.dataOffset, 'independent reader: data offset')
    const hfMeta = hf.metadata as unknown as Record<string, unknown>
    t.equal(hfMeta['general.architecture'], 'qwen2')
    t.equal(hfMeta['qwen2.block_count'], 1)
    t.same(hfMeta['tokenizer.ggml.tokens'], ['a', 'bb', ''])
    t.same(hf.tensorInfos.map(x => [x.name, x.shape.map(Number), x.dtype, Number(x.offset)]),
      g.tensors.map(x => [x.name, x.dims, ({ F32: 0, F16: 1, Q4_0: 2 } as Record<string, number>)[x.type], x.offset]), 'independent reader: tensor infos')
  }
})

t.test('the writer refuses what llama.cpp would reject', async t => {
  const base = { metadata: [] as GgufMetadata }
  t.throws(() => ggufHeader({ ...base, tensors: [{ name: 'x', type: 'Q4_0', dims: [48, 1] }] }), /multiple of 32/, 'rows of whole blocks')
  t.throws(() => ggufHeader({ ...base, tensors: [{ name: 'x', type: 'F32', dims: [1] }, { name: 'x', type: 'F32', dims: [1] }] }), /twice/, 'unique names')
  t.throws(() => ggufHeader({ ...base, tensors: [{ name: 'n'.repeat(64), type: 'F32', dims: [1] }] }), /63 bytes/, 'names fit ggml')
  t.throws(() => ggufHeader({ ...base, tensors: [], alignment: 48 }), /power of two/)
  t.throws(() => ggufHeader({ metadata: [['general.alignment', gguf.u32(16)]], tensors: [], alignment: 64 }), /general.alignment/)
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'chatd-gguf-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'short.gguf')
  t.throws(() => writeGguf(file, { ...base, tensors: [{ name: 'x', type: 'F32', dims: [4] }], data: () => new Uint8Array(12) }), /takes 16 bytes, got 12/)
  t.equal(fs.existsSync(file) || fs.existsSync(`${file}.partial`), false, 'a failed write leaves nothing')
})

t.test('Hugging Face Qwen2 names map to llama.cpp tensor names', async t => {
  t.equal(ggufTensorName('model.embed_tokens.weight'), 'token_embd.weight')
  t.equal(ggufTensorName('lm_head.weight'), 'output.weight')
  t.equal(ggufTensorName('model.norm.weight'), 'output_norm.weight')
  t.equal(ggufTensorName('model.layers.27.self_attn.q_proj.bias'), 'blk.27.attn_q.bias')
  t.equal(ggufTensorName('model.layers.3.self_attn.o_proj.weight'), 'blk.3.attn_output.weight')
  t.equal(ggufTensorName('model.layers.0.post_attention_layernorm.weight'), 'blk.0.ffn_norm.weight')
  t.equal(ggufTensorName('model.layers.0.mlp.down_proj.weight'), 'blk.0.ffn_down.weight')
  t.throws(() => ggufTensorName('model.layers.0.mlp.experts.weight'), /no GGUF name/)
})
