"""training.hardware: bf16 autocast only where the CPU has the instructions and a bf16 matmul is measured faster."""

from training.hardware import bf16_autocast_pays, time_matmuls

BF16_FLAGS = "flags : fpu avx512f avx512_bf16\n"
NO_BF16 = "flags : fpu avx2\n"


def test_no_bf16_instructions_means_fp32_without_timing_anything():
    def measure():
        raise AssertionError("timed a CPU without bf16 instructions")
    assert bf16_autocast_pays(cpuinfo=NO_BF16, measure=measure) is False


def test_the_faster_dtype_wins_by_the_margin():
    assert bf16_autocast_pays(cpuinfo=BF16_FLAGS, measure=lambda: (2.0, 1.0)) is True     # bf16 2x faster
    assert bf16_autocast_pays(cpuinfo=BF16_FLAGS, measure=lambda: (1.0, 1.4)) is False    # bf16 slower
    assert bf16_autocast_pays(cpuinfo=BF16_FLAGS, measure=lambda: (1.05, 1.0)) is False   # inside the margin


def test_time_matmuls_times_both_dtypes():
    fp32_s, bf16_s = time_matmuls(rows=64, reps=2)
    assert fp32_s > 0 and bf16_s > 0
