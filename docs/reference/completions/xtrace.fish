# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_xtrace_global_optspecs
    string join \n p/pid= a/system-wide d/duration= start-at= u/uprobe= U/usdt= exits= entry= max-probes= debug-dir= F/freq= user-stack= off-cpu= no-off-cpu no-inherit no-python stacks cuda inject mpi nvtx itt ranges gpu-metrics= min-duration= warn-over= tid= icicle o/output= label= store= store-spans gzip trace-format= live= flight= flight-size= flight-after= flight-trigger= q/quiet overhead buffer-size= h/help V/version
end

function __fish_xtrace_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_xtrace_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_xtrace_using_subcommand
    set -l cmd (__fish_xtrace_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c xtrace -n "__fish_xtrace_needs_command" -s p -l pid -d 'Trace this running process, all its threads (repeatable)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -s d -l duration -d 'Stop after this many seconds (fractions allowed, e.g. 0.5)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l start-at -d 'Begin the capture at WHEN: /PERIOD, @UNIX-SECONDS or an RFC 3339 time' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -s u -l uprobe -d 'Record one span per call of each function named (repeatable)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -s U -l usdt -d 'Attach to every call site of the named USDT probes (repeatable)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l exits -d 'How -u functions\' returns are probed: auto, uretprobe or ret' -r -f -a "auto\t'At their own exit instructions where an exception can unwind through them (files with exception tables, functions that call others); with return probes elsewhere'
uretprobe\t'With return probes (uretprobes) everywhere: cheapest, but an exception unwinding through a traced function aborts the process'
ret\t'At their own exit instructions everywhere they can be found'"
complete -c xtrace -n "__fish_xtrace_needs_command" -l entry -d 'Where -u functions\' entries are probed: auto or symbol' -r -f -a "auto\t'On the first instruction the kernel emulates, where the function starts with ones it would single-step and moving past them changes nothing a span shows'
symbol\t'On the function\'s first instruction (after a leading `endbr64`), as bpftrace and `perf probe` without debug information place them'"
complete -c xtrace -n "__fish_xtrace_needs_command" -l max-probes -d 'Refuse to attach more than N functions' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l debug-dir -d 'Also look for the debug files of stripped files in DIR (repeatable)' -r -F
complete -c xtrace -n "__fish_xtrace_needs_command" -s F -l freq -d 'Sample on-CPU stacks HZ times a second on every CPU' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l user-stack -d 'Bytes of user stack copied with each CPU sample (at most 16K; 0: frame pointers only)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l off-cpu -d 'Measure the time the traced threads spend off CPU: where they wait, in what, for how long' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l gpu-metrics -d 'Sample every NVIDIA GPU through NVML each PERIOD (default 100ms; `off` disables it)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l min-duration -d 'Send only calls lasting at least DURATION as spans (e.g. 50us, 2ms, 1s)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l warn-over -d 'Warn about every span over DURATION whose name PATTERN matches, e.g. \'work=100ms\'' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l tid -d 'Record only the calls and samples of this thread (repeatable)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -s o -l output -d 'Directory for the outputs [default: xtrace-YYYYmmdd-HHMMSS]' -r -F
complete -c xtrace -n "__fish_xtrace_needs_command" -l label -d 'Label the capture with KEY=VALUE, e.g. job=train or commit=1a2b3c (repeatable)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l store -d 'After the capture, store its statistics in a store of runs (see `xtrace push`): --store sqlite:PATH, --store clickhouse://HOST:PORT/DB, or --store alone for the SQLite file ~/.local/share/xtrace/runs.db (of the user who ran sudo, under sudo)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l trace-format -d 'The trace file\'s format: perfetto (trace.perfetto-trace) or json (trace.json)' -r -f -a "json\t'Chrome\'s Trace Event format (trace.json), which Perfetto reads as a legacy format'
perfetto\t'Perfetto\'s own protobuf format (trace.perfetto-trace)'"
complete -c xtrace -n "__fish_xtrace_needs_command" -l live -d 'Serve a live view of the capture on IP:PORT [default: 127.0.0.1 and a free port]' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l flight -d 'Keep only the last DURATION of events, in memory, written out on a trigger (e.g. 30s)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l flight-size -d 'The most memory the --flight buffer takes (at least 1M) [default: 64M]' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l flight-after -d 'Go on recording for DURATION after a --flight trigger before writing, so that the window holds what came after it too (e.g. 2s)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -l flight-trigger -d 'Write the --flight buffer on this besides SIGUSR1 and the stop: warn-over (a span over its --warn-over limit; at most once a window, however many follow)' -r -f -a "warn-over\t'A span over its --warn-over limit'"
complete -c xtrace -n "__fish_xtrace_needs_command" -l buffer-size -d 'Size of the kernel ring buffer that carries events to xtrace (4K to 1G)' -r
complete -c xtrace -n "__fish_xtrace_needs_command" -s a -l system-wide -d 'Trace every process that maps each probe\'s file'
complete -c xtrace -n "__fish_xtrace_needs_command" -l no-off-cpu -d 'Do not measure off-CPU time where it is on by itself (--pid without probes)'
complete -c xtrace -n "__fish_xtrace_needs_command" -l no-inherit -d 'Sample only the target processes, not the processes they start'
complete -c xtrace -n "__fish_xtrace_needs_command" -l no-python -d 'Leave Python frames out of CPU samples and off-CPU waits'
complete -c xtrace -n "__fish_xtrace_needs_command" -l stacks -d 'Record where each traced call came from: its stack at entry, Python frames included'
complete -c xtrace -n "__fish_xtrace_needs_command" -l cuda -d 'Trace CUDA runtime and driver calls, with kernel names'
complete -c xtrace -n "__fish_xtrace_needs_command" -l inject -d 'Load the tool library into a --pid process started without CUDA_INJECTION64_PATH'
complete -c xtrace -n "__fish_xtrace_needs_command" -l mpi -d 'Trace MPI calls: sends, receives, waits and collectives, with bytes and peers'
complete -c xtrace -n "__fish_xtrace_needs_command" -l nvtx -d 'Record NVTX ranges, marks and thread names as spans'
complete -c xtrace -n "__fish_xtrace_needs_command" -l itt -d 'Record Intel ITT tasks, frames and thread names as spans'
complete -c xtrace -n "__fish_xtrace_needs_command" -l ranges -d 'Record every annotation range: NVTX, ITT and xtrace_range_*'
complete -c xtrace -n "__fish_xtrace_needs_command" -l icicle -d 'Draw the flamegraphs as icicle graphs (stacks hanging from the top)'
complete -c xtrace -n "__fish_xtrace_needs_command" -l store-spans -d 'With --store: also store every span of the trace (name, pid, tid, start, duration)'
complete -c xtrace -n "__fish_xtrace_needs_command" -l gzip -d 'Write the trace compressed as it is recorded: trace.perfetto-trace.gz (trace.json.gz with --trace-format json)'
complete -c xtrace -n "__fish_xtrace_needs_command" -s q -l quiet -d 'Print nothing but errors (no attach notice, no live status, no summary table)'
complete -c xtrace -n "__fish_xtrace_needs_command" -l overhead -d 'Measure xtrace\'s own kernel programs while recording'
complete -c xtrace -n "__fish_xtrace_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c xtrace -n "__fish_xtrace_needs_command" -s V -l version -d 'Print version'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "record" -d 'Attach probes to processes and record spans (the default)'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "list" -d 'List what could be traced, e.g. `xtrace list symbols TARGET [GLOB]`'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "flamegraph" -d 'Draw a differential flamegraph of two captures: `xtrace flamegraph --diff BASE NEW`'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "report" -d 'Re-render a capture: statistics, bottlenecks, or pprof/callgrind/span flamegraph'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "diff" -d 'Compare two captures; exit 1 when a probe regressed (a CI gate)'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "convert" -d 'Write a capture\'s trace.json as trace.perfetto-trace beside it'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "merge" -d 'Merge the captures of a distributed job (its ranks, its hosts) into one, on one clock'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "push" -d 'Store a capture\'s statistics in a store of runs (SQLite or ClickHouse), once'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "history" -d 'Show functions\' statistics across the runs of a store, run by run or by label'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "gate" -d 'Judge a run against stored baseline runs; exit 1 when a function regressed (a CI gate)'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "check" -d 'Check whether this host can record: kernel, BTF, BPF features, settings, capabilities'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "view" -d 'Serve a finished capture with the live view\'s page: `xtrace view DIR`, or two compared: `xtrace view --diff BASE NEW`'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "generate" -d 'Write the man pages, shell completions and Markdown CLI reference into a directory'
complete -c xtrace -n "__fish_xtrace_needs_command" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -s p -l pid -d 'Trace this running process, all its threads (repeatable)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -s d -l duration -d 'Stop after this many seconds (fractions allowed, e.g. 0.5)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l start-at -d 'Begin the capture at WHEN: /PERIOD, @UNIX-SECONDS or an RFC 3339 time' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -s u -l uprobe -d 'Record one span per call of each function named (repeatable)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -s U -l usdt -d 'Attach to every call site of the named USDT probes (repeatable)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l exits -d 'How -u functions\' returns are probed: auto, uretprobe or ret' -r -f -a "auto\t'At their own exit instructions where an exception can unwind through them (files with exception tables, functions that call others); with return probes elsewhere'
uretprobe\t'With return probes (uretprobes) everywhere: cheapest, but an exception unwinding through a traced function aborts the process'
ret\t'At their own exit instructions everywhere they can be found'"
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l entry -d 'Where -u functions\' entries are probed: auto or symbol' -r -f -a "auto\t'On the first instruction the kernel emulates, where the function starts with ones it would single-step and moving past them changes nothing a span shows'
symbol\t'On the function\'s first instruction (after a leading `endbr64`), as bpftrace and `perf probe` without debug information place them'"
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l max-probes -d 'Refuse to attach more than N functions' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l debug-dir -d 'Also look for the debug files of stripped files in DIR (repeatable)' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -s F -l freq -d 'Sample on-CPU stacks HZ times a second on every CPU' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l user-stack -d 'Bytes of user stack copied with each CPU sample (at most 16K; 0: frame pointers only)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l off-cpu -d 'Measure the time the traced threads spend off CPU: where they wait, in what, for how long' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l gpu-metrics -d 'Sample every NVIDIA GPU through NVML each PERIOD (default 100ms; `off` disables it)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l min-duration -d 'Send only calls lasting at least DURATION as spans (e.g. 50us, 2ms, 1s)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l warn-over -d 'Warn about every span over DURATION whose name PATTERN matches, e.g. \'work=100ms\'' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l tid -d 'Record only the calls and samples of this thread (repeatable)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -s o -l output -d 'Directory for the outputs [default: xtrace-YYYYmmdd-HHMMSS]' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l label -d 'Label the capture with KEY=VALUE, e.g. job=train or commit=1a2b3c (repeatable)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l store -d 'After the capture, store its statistics in a store of runs (see `xtrace push`): --store sqlite:PATH, --store clickhouse://HOST:PORT/DB, or --store alone for the SQLite file ~/.local/share/xtrace/runs.db (of the user who ran sudo, under sudo)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l trace-format -d 'The trace file\'s format: perfetto (trace.perfetto-trace) or json (trace.json)' -r -f -a "json\t'Chrome\'s Trace Event format (trace.json), which Perfetto reads as a legacy format'
perfetto\t'Perfetto\'s own protobuf format (trace.perfetto-trace)'"
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l live -d 'Serve a live view of the capture on IP:PORT [default: 127.0.0.1 and a free port]' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l flight -d 'Keep only the last DURATION of events, in memory, written out on a trigger (e.g. 30s)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l flight-size -d 'The most memory the --flight buffer takes (at least 1M) [default: 64M]' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l flight-after -d 'Go on recording for DURATION after a --flight trigger before writing, so that the window holds what came after it too (e.g. 2s)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l flight-trigger -d 'Write the --flight buffer on this besides SIGUSR1 and the stop: warn-over (a span over its --warn-over limit; at most once a window, however many follow)' -r -f -a "warn-over\t'A span over its --warn-over limit'"
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l buffer-size -d 'Size of the kernel ring buffer that carries events to xtrace (4K to 1G)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -s a -l system-wide -d 'Trace every process that maps each probe\'s file'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l no-off-cpu -d 'Do not measure off-CPU time where it is on by itself (--pid without probes)'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l no-inherit -d 'Sample only the target processes, not the processes they start'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l no-python -d 'Leave Python frames out of CPU samples and off-CPU waits'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l stacks -d 'Record where each traced call came from: its stack at entry, Python frames included'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l cuda -d 'Trace CUDA runtime and driver calls, with kernel names'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l inject -d 'Load the tool library into a --pid process started without CUDA_INJECTION64_PATH'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l mpi -d 'Trace MPI calls: sends, receives, waits and collectives, with bytes and peers'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l nvtx -d 'Record NVTX ranges, marks and thread names as spans'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l itt -d 'Record Intel ITT tasks, frames and thread names as spans'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l ranges -d 'Record every annotation range: NVTX, ITT and xtrace_range_*'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l icicle -d 'Draw the flamegraphs as icicle graphs (stacks hanging from the top)'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l store-spans -d 'With --store: also store every span of the trace (name, pid, tid, start, duration)'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l gzip -d 'Write the trace compressed as it is recorded: trace.perfetto-trace.gz (trace.json.gz with --trace-format json)'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -s q -l quiet -d 'Print nothing but errors (no attach notice, no live status, no summary table)'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -l overhead -d 'Measure xtrace\'s own kernel programs while recording'
complete -c xtrace -n "__fish_xtrace_using_subcommand record" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and not __fish_seen_subcommand_from symbols usdt help" -s h -l help -d 'Print help'
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and not __fish_seen_subcommand_from symbols usdt help" -f -a "symbols" -d 'Functions that `-u` would attach: `list symbols TARGET [GLOB]` or `list symbols --pid PID [\'[TARGET:]GLOB\']`'
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and not __fish_seen_subcommand_from symbols usdt help" -f -a "usdt" -d 'USDT probes (`.note.stapsdt`) that `-U` can attach: `list usdt TARGET` or `list usdt --pid PID [TARGET]` (every module the process maps when TARGET is omitted)'
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and not __fish_seen_subcommand_from symbols usdt help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and __fish_seen_subcommand_from symbols" -s p -l pid -d 'Resolve TARGET in this process (its main executable when TARGET is omitted)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and __fish_seen_subcommand_from symbols" -l entry -d 'Where the PROBE column places entry probes, as `xtrace --entry` does' -r -f -a "auto\t'On the first instruction the kernel emulates, where the function starts with ones it would single-step and moving past them changes nothing a span shows'
symbol\t'On the function\'s first instruction (after a leading `endbr64`), as bpftrace and `perf probe` without debug information place them'"
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and __fish_seen_subcommand_from symbols" -l exits -d 'How returns would be probed, as `xtrace --exits` does: an entry never moves onto an exit probed at its instruction' -r -f -a "auto\t'At their own exit instructions where an exception can unwind through them (files with exception tables, functions that call others); with return probes elsewhere'
uretprobe\t'With return probes (uretprobes) everywhere: cheapest, but an exception unwinding through a traced function aborts the process'
ret\t'At their own exit instructions everywhere they can be found'"
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and __fish_seen_subcommand_from symbols" -l debug-dir -d 'Also look for the separate debug files of stripped files in DIR, as `xtrace --debug-dir` does (repeatable)' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and __fish_seen_subcommand_from symbols" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and __fish_seen_subcommand_from usdt" -s p -l pid -d 'List the modules this process maps (its main executable and every library)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and __fish_seen_subcommand_from usdt" -s h -l help -d 'Print help'
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and __fish_seen_subcommand_from help" -f -a "symbols" -d 'Functions that `-u` would attach: `list symbols TARGET [GLOB]` or `list symbols --pid PID [\'[TARGET:]GLOB\']`'
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and __fish_seen_subcommand_from help" -f -a "usdt" -d 'USDT probes (`.note.stapsdt`) that `-U` can attach: `list usdt TARGET` or `list usdt --pid PID [TARGET]` (every module the process maps when TARGET is omitted)'
complete -c xtrace -n "__fish_xtrace_using_subcommand list; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c xtrace -n "__fish_xtrace_using_subcommand flamegraph" -l diff -d 'The two captures to compare: directories recorded with CPU sampling (their stacks.folded), or folded-stack files' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand flamegraph" -s o -l output -d 'Where to write the SVG' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand flamegraph" -l normalize -d 'Scale BASE\'s sample counts to NEW\'s total, so that captures of different lengths compare by share rather than by count'
complete -c xtrace -n "__fish_xtrace_using_subcommand flamegraph" -s h -l help -d 'Print help'
complete -c xtrace -n "__fish_xtrace_using_subcommand report" -l format -d 'What to produce' -r -f -a "text\t'Readable tables (stdout)'
json\t'Everything as one JSON object (stdout)'
csv\t'The per-probe table as CSV (stdout)'
pprof\t'Google\'s pprof profile of the samples and spans (default file profile.pb.gz)'
callgrind\t'Callgrind format for KCachegrind (stdout)'
span-flamegraph\t'Time-weighted flamegraph of nested spans (default file span-flamegraph.svg)'"
complete -c xtrace -n "__fish_xtrace_using_subcommand report" -s o -l output -d 'Write to FILE instead of stdout (pprof and span-flamegraph: instead of profile.pb.gz and span-flamegraph.svg in the current directory)' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand report" -l top -d 'Rows of the top-N tables and of the outlier and share lists' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand report" -l min-count -d 'Search only probes with at least N spans for outliers' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand report" -l icicle -d 'With --format span-flamegraph: draw it as an icicle graph (stacks hanging from the top)'
complete -c xtrace -n "__fish_xtrace_using_subcommand report" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c xtrace -n "__fish_xtrace_using_subcommand diff" -l threshold -d 'Relative growth of a probe\'s p50 or mean beyond which it regressed (with statistical support): a percentage such as `5%` or `5`' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand diff" -l min-count -d 'Judge only probes with at least N spans in each capture' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand diff" -s o -l output -d 'Where to write the differential flamegraph (when both captures have stacks.folded)' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand diff" -l markdown -d 'Also write the probes\' comparison and the verdict as Markdown to FILE, for a pull-request comment (the same table `xtrace gate --markdown` writes)' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand diff" -s h -l help -d 'Print help'
complete -c xtrace -n "__fish_xtrace_using_subcommand convert" -l trace-format -d 'The format to write: perfetto (trace.perfetto-trace) or json (trace.json) [default: the format the capture\'s trace is not in]' -r -f -a "json\t'Chrome\'s Trace Event format (trace.json), which Perfetto reads as a legacy format'
perfetto\t'Perfetto\'s own protobuf format (trace.perfetto-trace)'"
complete -c xtrace -n "__fish_xtrace_using_subcommand convert" -l gzip -d 'Write the new trace compressed (trace.json.gz, trace.perfetto-trace.gz)'
complete -c xtrace -n "__fish_xtrace_using_subcommand convert" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c xtrace -n "__fish_xtrace_using_subcommand merge" -s o -l output -d 'The directory to write the merged capture into (created if missing)' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand merge" -l trace-format -d 'The merged trace\'s format: perfetto (trace.perfetto-trace) or json (trace.json)' -r -f -a "json\t'Chrome\'s Trace Event format (trace.json), which Perfetto reads as a legacy format'
perfetto\t'Perfetto\'s own protobuf format (trace.perfetto-trace)'"
complete -c xtrace -n "__fish_xtrace_using_subcommand merge" -l step -d 'Also name the stragglers of each step: the spans of this name (repeatable)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand merge" -l align -d 'How to line the captures up: by their clock pairs, or also by their MPI collectives' -r -f -a "clocks\t'By each capture\'s clock pairs: as its host\'s wall clock agrees with the others\''
collectives\t'Then by the ends of the MPI collectives every rank leaves together. Not by NCCL\'s: an NCCL call returns once its work is queued on the GPU, before the others have arrived'"
complete -c xtrace -n "__fish_xtrace_using_subcommand merge" -l gzip -d 'Write the merged trace compressed'
complete -c xtrace -n "__fish_xtrace_using_subcommand merge" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c xtrace -n "__fish_xtrace_using_subcommand push" -l store -d 'The store: sqlite:PATH (a file, made if missing) or clickhouse://HOST:PORT/DB (ClickHouse\'s HTTP interface; the database is made if missing)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand push" -l store-spans -d 'Also store every span of the capture\'s trace (name, pid, tid, start, duration), as `record --store-spans` does'
complete -c xtrace -n "__fish_xtrace_using_subcommand push" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c xtrace -n "__fish_xtrace_using_subcommand history" -l store -d 'The store: sqlite:PATH (a file, made if missing) or clickhouse://HOST:PORT/DB (ClickHouse\'s HTTP interface; the database is made if missing)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand history" -l by -d 'One row per value of this label (`--label` of `xtrace record`, e.g. commit), its runs\' calls added up, in the order the values were first recorded; runs without it are left out. Without it, one row per run, oldest first' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand history" -l where -d 'Only the runs labelled so: LABEL=VALUE' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand history" -l svg -d 'Also draw each function\'s p50 and p99 across the rows as a line chart into FILE (SVG)' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand history" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c xtrace -n "__fish_xtrace_using_subcommand gate" -l store -d 'The store: sqlite:PATH (a file, made if missing) or clickhouse://HOST:PORT/DB (ClickHouse\'s HTTP interface; the database is made if missing)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand gate" -l baseline -d 'The baseline: the stored runs labelled LABEL=VALUE (at least three)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand gate" -l candidate -d 'The run judged: a capture directory, or the stored runs labelled LABEL=VALUE (their calls added up)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand gate" -l threshold -d 'How far above the slowest baseline run a function\'s p50 must be to regress: a percentage such as `5%` or `5`. It must also be 3 standard deviations above the baseline runs\' mean p50' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand gate" -l min-count -d 'Judge only functions the candidate called at least N times' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand gate" -l markdown -d 'Also write the verdicts as Markdown to FILE, for a pull-request comment (the table of `xtrace diff --markdown`)' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand gate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c xtrace -n "__fish_xtrace_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c xtrace -n "__fish_xtrace_using_subcommand view" -l diff -d 'Show two captures compared instead: the probes\' table, verdicts and differential flamegraph that `xtrace diff BASE NEW` makes (with `--threshold` and `--min-count`)' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand view" -l threshold -d 'With `--diff`: judge as `xtrace diff --threshold` does (and by its default)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand view" -l min-count -d 'With `--diff`: judge as `xtrace diff --min-count` does (and by its default)' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand view" -l listen -d 'Serve on IP:PORT [default: 127.0.0.1 and a free port]' -r
complete -c xtrace -n "__fish_xtrace_using_subcommand view" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c xtrace -n "__fish_xtrace_using_subcommand generate" -s o -l output -d 'The directory to write man/, completions/ and cli.md into (created if missing)' -r -F
complete -c xtrace -n "__fish_xtrace_using_subcommand generate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "record" -d 'Attach probes to processes and record spans (the default)'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "list" -d 'List what could be traced, e.g. `xtrace list symbols TARGET [GLOB]`'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "flamegraph" -d 'Draw a differential flamegraph of two captures: `xtrace flamegraph --diff BASE NEW`'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "report" -d 'Re-render a capture: statistics, bottlenecks, or pprof/callgrind/span flamegraph'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "diff" -d 'Compare two captures; exit 1 when a probe regressed (a CI gate)'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "convert" -d 'Write a capture\'s trace.json as trace.perfetto-trace beside it'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "merge" -d 'Merge the captures of a distributed job (its ranks, its hosts) into one, on one clock'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "push" -d 'Store a capture\'s statistics in a store of runs (SQLite or ClickHouse), once'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "history" -d 'Show functions\' statistics across the runs of a store, run by run or by label'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "gate" -d 'Judge a run against stored baseline runs; exit 1 when a function regressed (a CI gate)'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "check" -d 'Check whether this host can record: kernel, BTF, BPF features, settings, capabilities'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "view" -d 'Serve a finished capture with the live view\'s page: `xtrace view DIR`, or two compared: `xtrace view --diff BASE NEW`'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "generate" -d 'Write the man pages, shell completions and Markdown CLI reference into a directory'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and not __fish_seen_subcommand_from record list flamegraph report diff convert merge push history gate check view generate help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and __fish_seen_subcommand_from list" -f -a "symbols" -d 'Functions that `-u` would attach: `list symbols TARGET [GLOB]` or `list symbols --pid PID [\'[TARGET:]GLOB\']`'
complete -c xtrace -n "__fish_xtrace_using_subcommand help; and __fish_seen_subcommand_from list" -f -a "usdt" -d 'USDT probes (`.note.stapsdt`) that `-U` can attach: `list usdt TARGET` or `list usdt --pid PID [TARGET]` (every module the process maps when TARGET is omitted)'
