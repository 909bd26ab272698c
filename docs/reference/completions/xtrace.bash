_xtrace() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="xtrace"
                ;;
            xtrace,check)
                cmd="xtrace__subcmd__check"
                ;;
            xtrace,convert)
                cmd="xtrace__subcmd__convert"
                ;;
            xtrace,diff)
                cmd="xtrace__subcmd__diff"
                ;;
            xtrace,flamegraph)
                cmd="xtrace__subcmd__flamegraph"
                ;;
            xtrace,gate)
                cmd="xtrace__subcmd__gate"
                ;;
            xtrace,generate)
                cmd="xtrace__subcmd__generate"
                ;;
            xtrace,help)
                cmd="xtrace__subcmd__help"
                ;;
            xtrace,history)
                cmd="xtrace__subcmd__history"
                ;;
            xtrace,list)
                cmd="xtrace__subcmd__list"
                ;;
            xtrace,merge)
                cmd="xtrace__subcmd__merge"
                ;;
            xtrace,push)
                cmd="xtrace__subcmd__push"
                ;;
            xtrace,record)
                cmd="xtrace__subcmd__record"
                ;;
            xtrace,report)
                cmd="xtrace__subcmd__report"
                ;;
            xtrace,view)
                cmd="xtrace__subcmd__view"
                ;;
            xtrace__subcmd__help,check)
                cmd="xtrace__subcmd__help__subcmd__check"
                ;;
            xtrace__subcmd__help,convert)
                cmd="xtrace__subcmd__help__subcmd__convert"
                ;;
            xtrace__subcmd__help,diff)
                cmd="xtrace__subcmd__help__subcmd__diff"
                ;;
            xtrace__subcmd__help,flamegraph)
                cmd="xtrace__subcmd__help__subcmd__flamegraph"
                ;;
            xtrace__subcmd__help,gate)
                cmd="xtrace__subcmd__help__subcmd__gate"
                ;;
            xtrace__subcmd__help,generate)
                cmd="xtrace__subcmd__help__subcmd__generate"
                ;;
            xtrace__subcmd__help,help)
                cmd="xtrace__subcmd__help__subcmd__help"
                ;;
            xtrace__subcmd__help,history)
                cmd="xtrace__subcmd__help__subcmd__history"
                ;;
            xtrace__subcmd__help,list)
                cmd="xtrace__subcmd__help__subcmd__list"
                ;;
            xtrace__subcmd__help,merge)
                cmd="xtrace__subcmd__help__subcmd__merge"
                ;;
            xtrace__subcmd__help,push)
                cmd="xtrace__subcmd__help__subcmd__push"
                ;;
            xtrace__subcmd__help,record)
                cmd="xtrace__subcmd__help__subcmd__record"
                ;;
            xtrace__subcmd__help,report)
                cmd="xtrace__subcmd__help__subcmd__report"
                ;;
            xtrace__subcmd__help,view)
                cmd="xtrace__subcmd__help__subcmd__view"
                ;;
            xtrace__subcmd__help__subcmd__list,symbols)
                cmd="xtrace__subcmd__help__subcmd__list__subcmd__symbols"
                ;;
            xtrace__subcmd__help__subcmd__list,usdt)
                cmd="xtrace__subcmd__help__subcmd__list__subcmd__usdt"
                ;;
            xtrace__subcmd__list,help)
                cmd="xtrace__subcmd__list__subcmd__help"
                ;;
            xtrace__subcmd__list,symbols)
                cmd="xtrace__subcmd__list__subcmd__symbols"
                ;;
            xtrace__subcmd__list,usdt)
                cmd="xtrace__subcmd__list__subcmd__usdt"
                ;;
            xtrace__subcmd__list__subcmd__help,help)
                cmd="xtrace__subcmd__list__subcmd__help__subcmd__help"
                ;;
            xtrace__subcmd__list__subcmd__help,symbols)
                cmd="xtrace__subcmd__list__subcmd__help__subcmd__symbols"
                ;;
            xtrace__subcmd__list__subcmd__help,usdt)
                cmd="xtrace__subcmd__list__subcmd__help__subcmd__usdt"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        xtrace)
            opts="-p -a -d -u -U -F -o -q -h -V --pid --system-wide --duration --start-at --uprobe --usdt --exits --entry --max-probes --debug-dir --freq --user-stack --off-cpu --no-off-cpu --no-inherit --no-python --stacks --cuda --inject --mpi --nvtx --itt --ranges --gpu-metrics --min-duration --warn-over --tid --icicle --output --label --store --store-spans --gzip --trace-format --live --flight --flight-size --flight-after --flight-trigger --quiet --overhead --buffer-size --help --version record list flamegraph report diff convert merge push history gate check view generate help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -p)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --duration)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -d)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --start-at)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --uprobe)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -u)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --usdt)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -U)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --exits)
                    COMPREPLY=($(compgen -W "auto uretprobe ret" -- "${cur}"))
                    return 0
                    ;;
                --entry)
                    COMPREPLY=($(compgen -W "auto symbol" -- "${cur}"))
                    return 0
                    ;;
                --max-probes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --debug-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --freq)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -F)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --user-stack)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --off-cpu)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gpu-metrics)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-duration)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --warn-over)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --label)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --store)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --trace-format)
                    COMPREPLY=($(compgen -W "json perfetto" -- "${cur}"))
                    return 0
                    ;;
                --live)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --flight)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --flight-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --flight-after)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --flight-trigger)
                    COMPREPLY=($(compgen -W "warn-over" -- "${cur}"))
                    return 0
                    ;;
                --buffer-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__check)
            opts="-h --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__convert)
            opts="-h --trace-format --gzip --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --trace-format)
                    COMPREPLY=($(compgen -W "json perfetto" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__diff)
            opts="-o -h --threshold --min-count --output --markdown --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --threshold)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-count)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --markdown)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__flamegraph)
            opts="-o -h --diff --output --normalize --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --diff)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__gate)
            opts="-h --store --baseline --candidate --threshold --min-count --markdown --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --store)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --baseline)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --candidate)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --threshold)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-count)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --markdown)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__generate)
            opts="-o -h --output --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help)
            opts="record list flamegraph report diff convert merge push history gate check view generate help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__check)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__convert)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__diff)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__flamegraph)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__gate)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__generate)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__history)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__list)
            opts="symbols usdt"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__list__subcmd__symbols)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__list__subcmd__usdt)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__merge)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__push)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__record)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__report)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__help__subcmd__view)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__history)
            opts="-h --store --by --where --svg --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --store)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --by)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --where)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --svg)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__list)
            opts="-h --help symbols usdt help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__list__subcmd__help)
            opts="symbols usdt help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__list__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__list__subcmd__help__subcmd__symbols)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__list__subcmd__help__subcmd__usdt)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__list__subcmd__symbols)
            opts="-p -h --pid --entry --exits --debug-dir --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -p)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --entry)
                    COMPREPLY=($(compgen -W "auto symbol" -- "${cur}"))
                    return 0
                    ;;
                --exits)
                    COMPREPLY=($(compgen -W "auto uretprobe ret" -- "${cur}"))
                    return 0
                    ;;
                --debug-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__list__subcmd__usdt)
            opts="-p -h --pid --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -p)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__merge)
            opts="-o -h --output --trace-format --gzip --step --align --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --trace-format)
                    COMPREPLY=($(compgen -W "json perfetto" -- "${cur}"))
                    return 0
                    ;;
                --step)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --align)
                    COMPREPLY=($(compgen -W "clocks collectives" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__push)
            opts="-h --store --store-spans --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --store)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__record)
            opts="-p -a -d -u -U -F -o -q -h --pid --system-wide --duration --start-at --uprobe --usdt --exits --entry --max-probes --debug-dir --freq --user-stack --off-cpu --no-off-cpu --no-inherit --no-python --stacks --cuda --inject --mpi --nvtx --itt --ranges --gpu-metrics --min-duration --warn-over --tid --icicle --output --label --store --store-spans --gzip --trace-format --live --flight --flight-size --flight-after --flight-trigger --quiet --overhead --buffer-size --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -p)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --duration)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -d)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --start-at)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --uprobe)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -u)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --usdt)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -U)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --exits)
                    COMPREPLY=($(compgen -W "auto uretprobe ret" -- "${cur}"))
                    return 0
                    ;;
                --entry)
                    COMPREPLY=($(compgen -W "auto symbol" -- "${cur}"))
                    return 0
                    ;;
                --max-probes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --debug-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --freq)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -F)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --user-stack)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --off-cpu)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gpu-metrics)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-duration)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --warn-over)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --label)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --store)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --trace-format)
                    COMPREPLY=($(compgen -W "json perfetto" -- "${cur}"))
                    return 0
                    ;;
                --live)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --flight)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --flight-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --flight-after)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --flight-trigger)
                    COMPREPLY=($(compgen -W "warn-over" -- "${cur}"))
                    return 0
                    ;;
                --buffer-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__report)
            opts="-o -h --format --output --top --min-count --icicle --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --format)
                    COMPREPLY=($(compgen -W "text json csv pprof callgrind span-flamegraph" -- "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --top)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-count)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        xtrace__subcmd__view)
            opts="-h --diff --threshold --min-count --listen --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --diff)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --threshold)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-count)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _xtrace -o nosort -o bashdefault -o default xtrace
else
    complete -F _xtrace -o bashdefault -o default xtrace
fi
