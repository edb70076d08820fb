// A copy of onnxruntime-node's package.json and install scripts in a temp
// directory, with the modules those scripts need linked beside it, so a test
// can run its install script without any chance of writing into node_modules.

import { cpSync, mkdirSync, symlinkSync } from 'node:fs'
import { join } from 'node:path'
import { ortPackageDir } from '../../src/engine/onnx/device/cuda-provider.ts'
import { REPO_ROOT } from './models.ts'

/** Copies onnxruntime-node's installer into `dir`/node_modules/onnxruntime-node; returns that directory. */
export function ortCopy (dir: string): string {
  const real = ortPackageDir()
  const copy = join(dir, 'node_modules', 'onnxruntime-node')
  mkdirSync(copy, { recursive: true })
  cpSync(join(real, 'package.json'), join(copy, 'package.json'))
  cpSync(join(real, 'script'), join(copy, 'script'), { recursive: true })
  for (const name of ['global-agent', 'adm-zip']) symlinkSync(join(REPO_ROOT, 'node_modules', name), join(dir, 'node_modules', name))
  return copy
}
