// sandboxd: node's bootstrap of a one-shot execution (docs/receipts.md).
// The launcher copies it next to the code as run.cjs and runs
// `node "$d/run.cjs"` (cold) or, in a pre-started guest of the execution
// pool, `node "$d/run.cjs" wait` (docs/pool.md "Execution guests").
//
// 1. Before anything else (on both paths, so that a pre-started interpreter
//    has done it before it waits and its state stays the cold one's): one
//    'beforeExit' listener (emitted only when node's loop has ended on its
//    own): when it is the only one and there is no 'exit' listener, nothing
//    of the code can run any more, and it ends the process as
//    process.exit() does after its 'exit' event (process.reallyExit, exit
//    code process.exitCode or 0), skipping node's natural-end teardown
//    (FreeEnvironment, isolate disposal: 150-200 ms under TCG); otherwise (a
//    listener of the code's own, an ES module main whose top-level await
//    never settled: node keeps an 'exit' one) node's end is unchanged. It
//    keeps its own reallyExit and listenerCount, so code that replaces them
//    does not change it. docs/receipts.md "How node ends".
// 2. Two things node otherwise does lazily while the code runs: set up
//    process.stdout and process.stderr (at the first console.log; for the
//    exec's pipes that loads `net`: 150-450 ms under TCG), and load the ESM
//    loader that Module.prototype.load touches once the main module has run
//    (50-150 ms), by loading an empty module from /dev/null outside
//    require.cache.
// 3. Pre-started only (`wait`): load what the cold path loads first
//    (module), write the pid to the FIFO `ready`, block in the open of the
//    FIFO `go` until the host's delivery wakes it, remove both, and exit 125
//    (as the cold launcher does) when main.js is not there (the upload
//    failed). A block of its own: nothing of the wait is in scope later.
// 4. Run main.js as the main module (Module.runMain: require.main,
//    process.argv [node, main.js]), in the same process, with no extra node
//    flags; CommonJS or ES module by Node 22's own rule (syntax detection;
//    no package.json is in scope of the code's directory).
"use strict";
{
	const R = process.reallyExit, C = process.listenerCount;
	process.on("beforeExit", function () {
		if (C.call(process, "beforeExit") === 1 && C.call(process, "exit") === 0)
			R(process.exitCode || 0);
	});
}
process.stdout;
process.stderr;
try {
	new (require("module"))("").load("/dev/null");
} catch {}
if (process.argv[2] === "wait") {
	const fs = require("fs"), d = __dirname;
	require("module");
	const w = fs.openSync(d + "/ready", "w");
	fs.writeSync(w, String(process.pid));
	fs.closeSync(w);
	fs.closeSync(fs.openSync(d + "/go", "w"));
	fs.unlinkSync(d + "/ready");
	fs.unlinkSync(d + "/go");
	if (!fs.existsSync(d + "/main.js"))
		process.exit(125);
}
{
	const M = require("module"), f = __dirname + "/main.js";
	process.argv.splice(1, process.argv.length - 1, f);
	M.runMain(f);
}
