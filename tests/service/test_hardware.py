"""service.hardware: the serving dtype follows the CPU's bf16 instructions unless a dtype is asked for."""

from service.hardware import cpu_has_bf16, serving_dtype

AMX = "flags\t\t: fpu sse2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX512_BF16 = "flags\t\t: fpu sse2 avx512f avx512_bf16 avx512_vnni\n"
NO_BF16 = "flags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n"


def test_bf16_instructions_are_read_from_cpu_flags():
    assert cpu_has_bf16(AMX) and cpu_has_bf16(AVX512_BF16)
    assert not cpu_has_bf16(NO_BF16)
    assert not cpu_has_bf16("flags : avx512_bf16x\n")   # a whole flag, not a substring


def test_auto_cpu_picks_bf16_only_where_it_is_native():
    assert serving_dtype("auto-cpu", cpuinfo=AMX) == "bfloat16"
    assert serving_dtype("auto-cpu", cpuinfo=NO_BF16) == "float32"
    assert serving_dtype("auto-cpu", on_cpu=False, cpuinfo=NO_BF16) == "auto"   # a GPU: vLLM's own choice


def test_an_explicit_dtype_overrides_the_flags():
    assert serving_dtype("float32", cpuinfo=AMX) == "float32"
    assert serving_dtype("bfloat16", cpuinfo=NO_BF16) == "bfloat16"



def test_engine_threads_bind_every_cpu_of_a_small_box_and_leave_explicit_settings_alone():
    from service.hardware import engine_thread_env

    assert engine_thread_env({}, [0, 1]) == {"OMP_NUM_THREADS": "2", "VLLM_CPU_OMP_THREADS_BIND": "0,1"}
    assert engine_thread_env({}, [2, 5, 7]) == {"OMP_NUM_THREADS": "3", "VLLM_CPU_OMP_THREADS_BIND": "2,5,7"}
    assert engine_thread_env({}, list(range(16))) == {"OMP_NUM_THREADS": "1"}   # vLLM's auto binding
    assert engine_thread_env({"OMP_NUM_THREADS": "1"}, [0, 1]) == {}
    assert engine_thread_env({"VLLM_CPU_OMP_THREADS_BIND": "0"}, [0, 1]) == {}
