"""What the log scanner looks for: event classes, the gate's literal anchors, and the rules per class.

Pure data and small pure functions, used by `llmdoctor/logs/scan.py`. Every rule was written against real
lines of vLLM, SGLang, TGI, llama.cpp server, llama-cpp-python, Ollama, the kernel, systemd, docker and
Ray; ``fixtures/logs/corpus`` holds them, one file per backend and class, each line with its public
source (``fixtures/logs/corpus/expected.tsv``), and ``tests/test_log_corpus.py`` checks that every one
is found with its class and kind, and that the healthy lines raise nothing.

The gate's anchors are literal byte strings: a line is looked at only if it contains one of them, so
every rule below can only match lines that contain an anchor (``tests/test_logscan.py`` checks it on
every fixture line a rule matches). Adding a rule means adding its anchor when no existing one covers it.
"""

from __future__ import annotations

from llmdoctor.logs.patterns import LazyPattern

__all__ = [
    "BURST_CLASSES",
    "BURST_LINES",
    "CLASSES",
    "CONTEXT_OVERFLOW",
    "DURATIONS",
    "GATE_ANCHORS",
    "GPU_ERROR",
    "GPU_OOM",
    "HOST_OOM",
    "KV_PREEMPTION",
    "LLAMACPP_ELAPSED",
    "MODEL_LOAD",
    "classify_line",
    "guess_backend",
]

GPU_OOM = "gpu_oom"
HOST_OOM = "host_oom"
GPU_ERROR = "gpu_error"
KV_PREEMPTION = "kv_preemption"
CONTEXT_OVERFLOW = "context_overflow"
MODEL_LOAD = "model_load"
CLASSES = (GPU_OOM, HOST_OOM, GPU_ERROR, KV_PREEMPTION, CONTEXT_OVERFLOW, MODEL_LOAD)

# Error classes whose hits on nearby lines describe one failure (llama.cpp prints three lines
# per failed allocation, the kernel four per OOM kill): hits of the same class at most this
# many lines after the previous one are folded into that event.
BURST_CLASSES = frozenset({GPU_OOM, HOST_OOM, GPU_ERROR})
BURST_LINES = 5

GATE_ANCHORS: tuple[bytes, ...] = (
    b"emory",  # out of memory, OutOfMemoryError, illegal memory access, memory slot, system memory, memory pressure
    b"to allocate",  # llama.cpp: failed / unable to allocate CUDA0 buffer
    b"illed",  # Killed process, OOMKilled, a shell's "Killed"; systemd: killed by the OOM killer,
    # code=killed, status=9/KILL; Ray: Task was killed due to the node running low on memory
    b"oom-kill",  # systemd: Failed with result 'oom-kill'; kernel oom-kill:constraint=
    b"code 137",  # exited with code 137, exit code 137
    b" error",  # CUDA error, NCCL error (one pass for both: the gate's cost is per anchor)
    b"NVRM: ",  # kernel: NVRM: Xid (PCI:0000:44:00): 79, ...; NVRM: GPU ...: GPU has fallen off the bus.
    b"reempt",  # vLLM: preempted by PreemptionMode / Preempted request; stats lines' Preemptions: N
    b"Retract",  # SGLang: KV cache pool is full. Retract requests.
    b" find ",  # llama.cpp: failed to find free space in the KV cache; Ollama: could not find a kv cache slot
    b"cache usage: 9",  # vLLM stats lines at 90-99.9 % KV-cache usage (and 9.x %, read and dropped)
    b"cache usage: 100",  # vLLM stats lines at 100 %
    b"token usage: 0.9",  # SGLang decode / prefill lines at 0.90-0.99 token usage
    b"token usage: 1",  # SGLang at 1.00
    b"too large for",  # Ollama: requested model (X) is too large for this system; model request too large for system
    b"context",  # maximum context length, context size, context window
    b"is too long",  # vLLM V0: Input prompt (N tokens) is too long; llama.cpp: prompt is too long
    b"runcat",  # Ollama: truncating input prompt; llama.cpp: input truncated
    b"Token indices",  # transformers: Token indices sequence length is longer than ...
    b"`inputs`",  # TGI: Input validation error: `inputs` tokens + `max_new_tokens` must be <=
    b"took",  # vLLM: Loading weights took / Model loading took / init engine ... took
    b"ready",  # TGI: Shard ready in 218.6s, Waiting for shard [0] to be ready...; SGLang: ready to roll
    b"arming up",  # TGI: Warming up model; llama.cpp: warming up the model
    b"started in",  # Ollama: llama runner started in 0.25 seconds
    b"load",  # llama.cpp: main: model loaded; llama_perf_context_print: load time = 618.92 ms; Ollama:
    # load_duration (ns), status="llm server loading model"
    b" end. ",  # SGLang: Capture cuda graph end. Time elapsed: 12.96 s; Load weight end. type=...
    b'" 400',  # uvicorn access line of a rejected request: "POST /v1/chat/completions HTTP/1.1" 400
    b"non-default args",  # vLLM: first line of a start (0.32: api_utils.py)
    b"vLLM ",  # vLLM: Starting vLLM [API ]server [N] on http://... (ready); older: vLLM API server version X
    b"Traceback (most recent call last)",
)

# Lines never reported, whatever they contain: harmless warnings, and lines that echo user
# text (vLLM's request log prints the prompt, which may say anything).
_HARMLESS = LazyPattern(
    r"Special tokens have been added in the vocabulary"
    r"|FutureWarning|DeprecationWarning|is deprecated"
    r"|[Uu]sage stats"
    r"|Received request \S+: prompt"
    r"|has been resumed"
    r"|^\s*(?:CUDA kernel errors might be asynchronously reported|For debugging consider passing"
    r"|Compile with `TORCH_USE_CUDA_DSA`|Search for `cuda)"
)

_RULES: tuple[tuple[str, str, LazyPattern], ...] = (
    # (class, kind, pattern) — first match wins; host OOM before GPU OOM ("Out of memory: Killed",
    # Ray's "OutOfMemoryError: Task was killed due to the node running low on memory").
    (HOST_OOM, "oom-kill", LazyPattern(
        r"Killed process \d+|invoked oom-killer|\boom-kill\b|oom_kill_process|Memory cgroup out of memory"
        r"|OOMKilled|code=killed, status=9/KILL|killed by the OOM killer")),
    (HOST_OOM, "ray-oom", LazyPattern(
        r"ray\.exceptions\.OutOfMemoryError|killed due to memory pressure \(OOM\)|node running low on memory"
        r"|exceeds the memory usage threshold")),
    (HOST_OOM, "refused", LazyPattern(
        r"model requires more system memory|is too large for this system|model request too large for system")),
    (HOST_OOM, "exit-137", LazyPattern(r"(?i)exit(?:ed)?(?: with)?(?: exit)? (?:code|status)[: =]*137\b")),
    (HOST_OOM, "killed", LazyPattern(r"^Killed\s*$|\b\d+\s+Killed\s+\S")),
    (GPU_OOM, "cuda-oom", LazyPattern(
        r"CUDA out of memory|OutOfMemoryError|cudaErrorMemoryAllocation|CUDA error: out of memory"
        r"|cudaMalloc failed: out of memory|out of device memory|ErrorOutOfDeviceMemory"
        r"|ggml_\w*cuda\w*.*out of memory|would exceed allowed memory")),
    (GPU_OOM, "alloc-failed", LazyPattern(
        r"(?:failed|unable) to allocate (?:\w+ )?(?:CUDA\d*|ROCm\d*|Metal|Vulkan\d*|SYCL\d*|GPU|backend|compute)"
        r"\w* buffer")),
    # The engine could not fit its KV cache (or one prompt's worth of it) in the GPU memory it was given.
    (GPU_OOM, "no-kv-memory", LazyPattern(
        r"No available memory for the cache blocks|maximum number of tokens that can be stored in KV cache"
        r"|larger than the available KV cache memory|Not enough memory\. Please try to increase --mem-fraction"
        r"|Not enough memory to handle \d+ prefill tokens")),
    (GPU_ERROR, "xid", LazyPattern(r"NVRM: Xid|\bXid \(PCI|fallen off the bus")),
    (GPU_ERROR, "nccl", LazyPattern(r"NCCL error")),
    (GPU_ERROR, "cuda", LazyPattern(
        r"CUDA error\b|illegal memory access was encountered|device-side assert triggered")),
    (KV_PREEMPTION, "preempted", LazyPattern(
        r"is preempted by PreemptionMode\.\w+|Preempted request|preempted (?:\d+ )?(?:requests?|seq)")),
    (KV_PREEMPTION, "retracted", LazyPattern(
        r"KV cache pool is full\. Retract requests|Retract requests|Decode out of memory happened")),
    # No room left in the KV cache for the next batch: llama.cpp retries with smaller batches, Ollama's
    # new engine panics, SGLang gives up after retracting.
    (KV_PREEMPTION, "kv-full", LazyPattern(
        r"failed to find free space in the KV cache|failed to find a memory slot for batch"
        r"|could not find a kv cache slot|Decode out of memory\. Try to lower")),
    (CONTEXT_OVERFLOW, "truncated", LazyPattern(
        r"truncating input prompt|input truncated|prompt truncated|truncated prompt")),
    (CONTEXT_OVERFLOW, "rejected", LazyPattern(
        r"maximum context length is \d+|is too long and exceeds (?:the )?limit"
        r"|exceeds the available context size|exceed_context_size_error|prompt is too long"
        r"|Token indices sequence length is longer than the specified maximum"
        r"|`inputs` tokens \+ `max_new_tokens` must be <=|`inputs` must have less than \d+ tokens"
        r"|is longer than the model\\?'s context length|exceeds the model\\?'s maximum context length"
        r"|exceed(?:s)? context window")),
    # vLLM 0.32 logs a prompt over --max-model-len only as uvicorn's access line (its error goes to the
    # client alone: fixtures/vllm/requests.log); other invalid requests look the same, so LD209 says so.
    (CONTEXT_OVERFLOW, "http-400", LazyPattern(
        r'"POST /v1/(?:chat/completions|completions|responses)\S* HTTP/[\d.]+" 400\b')),
    (MODEL_LOAD, "load", LazyPattern(
        r"Loading weights took|Model loading took|init engine \(.*\) took|Shard ready in"
        r"|Warming up model|llama runner started in|main: model loaded|\bload_duration\b"
        r"|\bload time\s+=|Capture cuda graph end\. Time elapsed|Load weight end\.|server is fired up")),
    # Start-up still under way: TGI's launcher waiting for its shards, Ollama waiting for its runner.
    (MODEL_LOAD, "waiting", LazyPattern(r"Waiting for shard (?:\d+ )?to be ready|llm server loading model")),
)

DURATIONS: tuple[tuple[str, str, LazyPattern, float], ...] = (
    # (backend, stage, pattern with the number as group 1, factor to seconds)
    ("vllm", "weights", LazyPattern(r"Loading weights took (\d+(?:\.\d+)?) ?s"), 1.0),
    ("vllm", "model_load", LazyPattern(r"Model loading took [\d.]+ ?GiB(?: memory)? and (\d+(?:\.\d+)?) ?s"), 1.0),
    ("vllm", "engine_init", LazyPattern(r"init engine \(.*\) took (\d+(?:\.\d+)?) ?s"), 1.0),
    ("tgi", "shard_ready", LazyPattern(r"Shard ready in (\d+(?:\.\d+)?)s"), 1.0),
    ("ollama", "runner_start", LazyPattern(r"llama runner started in (\d+(?:\.\d+)?) ?s"), 1.0),
    ("ollama", "load_duration", LazyPattern(r"\"?load_duration\"?\s*[:=]\s*(\d+)\b"), 1e-9),
    ("sglang", "cuda_graph", LazyPattern(r"Capture cuda graph end\. Time elapsed: (\d+(?:\.\d+)?) ?s"), 1.0),
    # llama.cpp's and llama-cpp-python's timings block: printed after each completion, the same load time.
    ("llama.cpp", "load_time", LazyPattern(r"\bload time\s+=\s+(\d+(?:\.\d+)?) ms"), 1e-3),
)

LLAMACPP_ELAPSED = LazyPattern(r"^(\d+)\.(\d\d)\.(\d\d\d)\.\d\d\d [IWED] ")

_BACKENDS = (
    ("vllm", LazyPattern(
        r"vllm|PreemptionMode|EngineCore|\[(?:loggers|scheduler|core|gpu_model_runner)\.py"
        r"|^(?:\([\w.-]+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d")),
    ("sglang", LazyPattern(
        r"sglang|\bTP\d+\]|Retract requests|Decode batch\.?,? #running-req|Decode out of memory"
        r"|Capture cuda graph|Load weight end|fired up|mem-fraction-static")),
    ("tgi", LazyPattern(r"text_generation|shard-manager|Input validation error|Waiting for shard|prefill tokens")),
    ("ollama", LazyPattern(
        r"ollama|level=\w+ source=\S+\.go:\d+|\[GIN\]|llama runner|system memory|llm server|kv cache slot")),
    ("llama.cpp", LazyPattern(r"llama|ggml|\bsrv\s|\bslot\s|n_ctx|update_slots|memory slot")),
    ("ray", LazyPattern(r"\bray\b|raylet|Ray killed")),
)


def classify_line(message: str) -> tuple[str, str] | None:
    """The ``(class, kind)`` of one cleaned log message, or None (also for harmless warnings)."""
    if _HARMLESS.search(message):
        return None
    for cls, kind, pattern in _RULES:
        if pattern.search(message):
            return cls, kind
    return None


def guess_backend(text: str) -> str | None:
    """The backend whose wording `text` carries, or None."""
    for name, pattern in _BACKENDS:
        if pattern.search(text):
            return name
    return None
