"""`bench/triton_ptx.py`'s instruction counts, on a hand-written PTX fragment."""

from bench import triton_ptx

_PTX = """
.visible .entry attention_dropout_forward(
	.param .u64 attention_dropout_forward_param_0
)
{
	.reg .b32 	%r<4>;
	.reg .f32 	%f<4>;
	.reg .pred 	%p<2>;
	mov.u32 	%r1, %tid.x;
	mul.lo.s32 	%r2, %r1, -1640531527;
	xor.b32 	%r3, %r2, %r1;
	shr.u32 	%r2, %r3, 16;
	setp.ge.u32 	%p1, %r2, 429496730;
	@%p1 add.s32 	%r3, %r3, 1;
	mul.f32 	%f1, %f2, %f3;
	selp.f32 	%f1, %f1, 0f00000000, %p1;
	ret;
}
"""


def test_integer_instructions_are_32_bit_integer_arithmetic_logic_and_comparisons() -> None:
    # mul.lo.s32, xor.b32, shr.u32, setp.ge.u32 and the predicated add.s32 are integer;
    # mov, mul.f32, selp.f32 and ret are not; declarations and labels are no instructions.
    assert triton_ptx.count(_PTX) == (5, 9)
