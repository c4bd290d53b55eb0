# The CPU options of the native ggml builds (scripts/build-llama.sh, scripts/build-whisper.sh),
# sourced by them. After it, $ggml_cpu_flags holds the cmake options and $ggml_cpu_key the part of
# the cache key they add.
#
# A build is native (-march=native, ggml's default) except on an x86 CPU with AMX: there ggml's
# AMX matrix path crashes (SIGSEGV in ggml_backend_amx_mul_mat, seen with whisper.cpp on the tiny
# test model on a Sapphire Rapids machine, and reported for llama.cpp with real Q4_K_M models,
# ggml-org/llama.cpp#20824). -march=native would switch AMX on again whatever comes before it, so
# such a CPU gets ggml's own per-feature options instead, each set from /proc/cpuinfo, with AMX off:
# the same vector code (AVX2, AVX-512, VNNI, BF16) without the AMX tiles.

ggml_cpu_flags=
ggml_cpu_key=
if [ "$(uname -m)" = x86_64 ] && [ -r /proc/cpuinfo ]; then
  ggml_cpu_have=" $(grep -m 1 '^flags' /proc/cpuinfo | cut -d : -f 2) "
  case $ggml_cpu_have in
    *" amx_int8 "* | *" amx_tile "* | *" amx_bf16 "*)
      ggml_cpu_on() {
        # $1: the ggml option; the rest: the cpuinfo flags it needs, all of them.
        option=$1
        shift
        value=ON
        for flag in "$@"; do
          case $ggml_cpu_have in *" $flag "*) ;; *) value=OFF ;; esac
        done
        ggml_cpu_flags="$ggml_cpu_flags -D$option=$value"
      }
      ggml_cpu_flags="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
      ggml_cpu_on GGML_SSE42 sse4_2
      ggml_cpu_on GGML_AVX avx
      ggml_cpu_on GGML_AVX2 avx2
      ggml_cpu_on GGML_BMI2 bmi2
      ggml_cpu_on GGML_FMA fma
      ggml_cpu_on GGML_F16C f16c
      ggml_cpu_on GGML_AVX_VNNI avx_vnni
      ggml_cpu_on GGML_AVX512 avx512f avx512cd avx512vl avx512dq avx512bw
      ggml_cpu_on GGML_AVX512_VBMI avx512vbmi
      ggml_cpu_on GGML_AVX512_VNNI avx512_vnni
      ggml_cpu_on GGML_AVX512_BF16 avx512_bf16
      ggml_cpu_key=-noamx
      ;;
  esac
fi
