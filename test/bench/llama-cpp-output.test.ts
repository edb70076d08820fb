// Reading llama.cpp's benchmark tools' machine-readable output (shapes as
// llama-bench -o json and llama-batched-bench --output-format jsonl print
// them), and the ratios the benchmark reports from it.
import t from 'tap'
import { llamaCppRatios, type LlamaCppReport } from '../../scripts/llama-cpp/index.ts'
import { parseBatchedBenchJsonl, parseLlamaBenchJson, vulkanDevice } from '../../scripts/llama-cpp/run.ts'

const row = (nPrompt: number, nGen: number, avg: number, sd: number): string => `  {
    "build_commit": "de3ff81",
    "build_number": 1,
    "cpu_info": "AMD EPYC",
    "gpu_info": "",
    "backends": "CPU",
    "model_filename": "bench-out/llama.cpp-models/qwen2-1.5b-shape-q4_0.gguf",
    "model_type": "qwen2 1.5B Q4_0",
    "model_size": 1046016000,
    "model_n_params": 1777088000,
    "n_threads": 2,
    "flash_attn": "auto",
    "n_prompt": ${nPrompt},
    "n_gen": ${nGen},
    "n_depth": 0,
    "test_time": "2026-11-22T02:00:00Z",
    "avg_ns": 1000,
    "stddev_ns": 10,
    "avg_ts": ${avg},
    "stddev_ts": ${sd},
    "samples_ns": [ 1000, 1000 ],
    "samples_ts": [ ${avg}, ${avg} ]
  }`

t.test('llama-bench JSON: prompt and decode rows', async t => {
  const text = `[\n${row(128, 0, 187.25, 1.5)},\n${row(0, 128, 26.04, 0.2)}\n]\n`
  const r = parseLlamaBenchJson(text, { prompt: 128, gen: 128 })
  t.equal(r.prefill_tok_s, 187.25)
  t.equal(r.prefill_tok_s_stddev, 1.5)
  t.equal(r.decode_tok_s, 26.04)
  t.equal(r.decode_tok_s_stddev, 0.2)
  t.equal(r.build_commit, 'de3ff81')
  t.equal(r.model_type, 'qwen2 1.5B Q4_0')
  t.equal(r.n_threads, 2)
  t.throws(() => parseLlamaBenchJson(text, { prompt: 512, gen: 128 }), /lacks pp512/)
  t.throws(() => parseLlamaBenchJson('error: failed to load model', { prompt: 128, gen: 128 }), /no JSON array/)
})

t.test('llama-batched-bench JSONL: one level per line, aggregate counted as chatd counts it', async t => {
  const line = (pl: number, tPp: number, tTg: number): string =>
    '{"n_kv_max": 2048, "n_batch": 2048, "n_ubatch": 512, "flash_attn": -1, "is_pp_shared": 0, "n_gpu_layers": -1, "n_threads": 2, "n_threads_batch": 2, ' +
    `"pp": 128, "tg": 128, "pl": ${pl}, "n_kv": ${pl * 256}, "t_pp": ${tPp}, "speed_pp": ${(pl * 128) / tPp}, "t_tg": ${tTg}, "speed_tg": ${(pl * 128) / tTg}, "t": ${tPp + tTg}, "speed": ${(pl * 256) / (tPp + tTg)}}`
  const text = ['llama_model_loader: loaded meta data', line(1, 0.5, 5), line(4, 2, 14), 'main: done'].join('\n')
  const levels = parseBatchedBenchJsonl(text)
  t.same(levels.map(l => l.sequences), [1, 4])
  t.equal(levels[1].aggregate_tok_s, (4 * 128) / 16, 'generated tokens over prefill + decode')
  t.equal(levels[1].decode_tok_s, (4 * 128) / 14, 'S_TG kept as the decode-phase rate')
  t.equal(levels[1].prefill_tok_s, (4 * 128) / 2)
  t.same(parseBatchedBenchJsonl('no results'), [])
})

t.test('ratios are chatd over llama.cpp, null when either side is missing', async t => {
  const llama = {
    llama_cpp_decode_tok_s_1: 26,
    llama_cpp_prefill_tok_s: 187,
    llama_cpp_aggregate_tok_s_1: 20,
    llama_cpp_aggregate_tok_s_4: 0,
  } as unknown as LlamaCppReport
  const r = llamaCppRatios({ decode_tok_s_1: 13, engine_only_decode_tok_s_1: 14, prefill_tok_s: 93.5, aggregate_tok_s_1: 10, aggregate_tok_s_4: 12 }, llama, [1, 4, 8])
  t.same(r, { ratio_decode_1: 0.5, ratio_engine_decode_1: 0.54, ratio_prefill: 0.5, ratio_aggregate_1: 0.5, ratio_aggregate_4: null, ratio_aggregate_8: null })
})

t.test('the Vulkan device llama.cpp ran on, from ggml\'s log; none when it found none', async t => {
  t.equal(vulkanDevice('ggml_vulkan: Found 1 Vulkan devices:\nggml_vulkan: 0 = NVIDIA H100 80GB HBM3 (NVIDIA) | uma: 0 | fp16: 1 | bf16: 1 | warp size: 32\nload_backend: loaded Vulkan backend'), 'NVIDIA H100 80GB HBM3 (NVIDIA)')
  t.equal(vulkanDevice('ggml_vulkan: 0 = llvmpipe (LLVM 15.0.6, 256 bits) (llvmpipe) | uma: 0 | fp16: 1'), 'llvmpipe (LLVM 15.0.6, 256 bits) (llvmpipe)')
  t.equal(vulkanDevice('ggml_vulkan: No devices found.\nload_backend: loaded CPU backend'), '')
})
