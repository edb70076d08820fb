// runLoad in a worker thread, so the clients' own work (autocannon's parsing,
// the streaming clients' SSE) does not run on the server's event loop and the
// main thread's heap figures are the server's alone.
import { parentPort, workerData } from 'node:worker_threads'
import { runLoad, type LoadPlan } from './drive.ts'

parentPort!.postMessage(await runLoad(workerData as LoadPlan))
