"""`bench/gpu_compile.py`'s model of the bytes a compiled step moves, on a hand-written HLO
module: a loop over 4 layers whose body reads one layer's slot of a stacked buffer and
writes another slot in place (what a scanned layer does with its saved activations), and
kernels reading parts of one product through static slices."""

from bench import gpu_compile

# Stack f32[4,8,16] (2,048 bytes), one slot f32[1,8,16] (512 bytes).
_HLO = """HloModule scanned

%read_slot (param_0: f32[4,8,16], param_1: s32[]) -> f32[1,8,16] {
  %param_0 = f32[4,8,16]{2,1,0} parameter(0)
  %param_1 = s32[] parameter(1)
  %zero = s32[] constant(0)
  ROOT %slot = f32[1,8,16]{2,1,0} dynamic-slice(%param_0, %param_1, %zero, %zero), dynamic_slice_sizes={1,8,16}
}

%write_slot (param_0: f32[4,8,16], param_1: f32[8,16], param_2: s32[]) -> f32[4,8,16] {
  %param_0 = f32[4,8,16]{2,1,0} parameter(0)
  %param_1 = f32[8,16]{1,0} parameter(1)
  %param_2 = s32[] parameter(2)
  %value = f32[8,16]{1,0} tanh(%param_1)
  %update = f32[1,8,16]{2,1,0} bitcast(%value)
  %zero = s32[] constant(0)
  ROOT %stacked = f32[4,8,16]{2,1,0} dynamic-update-slice(%param_0, %update, %param_2, %zero, %zero)
}

%layer (state: (s32[], f32[4,8,16], f32[8,16])) -> (s32[], f32[4,8,16], f32[8,16]) {
  %state = (s32[], f32[4,8,16]{2,1,0}, f32[8,16]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %stack = f32[4,8,16]{2,1,0} get-tuple-element(%state), index=1
  %x = f32[8,16]{1,0} get-tuple-element(%state), index=2
  %read = f32[1,8,16]{2,1,0} fusion(%stack, %i), kind=kLoop, calls=%read_slot, metadata={op_name="jit(step)/jvp(model)/encoder/layer_3/read"}
  %written = f32[4,8,16]{2,1,0} fusion(%stack, %x, %i), kind=kLoop, calls=%write_slot, metadata={op_name="jit(step)/transpose(jvp(model))/encoder/layer_3/tanh"}
  ROOT %next = (s32[], f32[4,8,16]{2,1,0}, f32[8,16]{1,0}) tuple(%i, %written, %x)
}

%more (state: (s32[], f32[4,8,16], f32[8,16])) -> pred[] {
  %state = (s32[], f32[4,8,16]{2,1,0}, f32[8,16]{1,0}) parameter(0)
  ROOT %go = pred[] constant(true)
}

ENTRY %main (x: f32[8,16], stack: f32[4,8,16]) -> f32[8,16] {
  %x = f32[8,16]{1,0} parameter(0)
  %stack = f32[4,8,16]{2,1,0} parameter(1)
  %zero = s32[] constant(0)
  %start = (s32[], f32[4,8,16]{2,1,0}, f32[8,16]{1,0}) tuple(%zero, %stack, %x)
  %while.1 = (s32[], f32[4,8,16]{2,1,0}, f32[8,16]{1,0}) while(%start), condition=%more, body=%layer, backend_config={"known_trip_count":{"n":"4"}}
  ROOT %out = f32[8,16]{1,0} get-tuple-element(%while.1), index=2
}
"""  # noqa: E501 (an HLO instruction is one line)


def test_a_loop_body_moves_its_slots_not_its_stacks_and_the_step_counts_every_pass() -> None:
    # Read: the slot (512) and the index (4) in, the slot out (512). Write in place: the
    # value (512) and the index (4) in, the slot written (512); the stack itself untouched.
    per_layer = (512 + 4 + 512) + (512 + 4 + 512)
    assert gpu_compile.layer_loops(_HLO) == [(2, per_layer)]
    assert gpu_compile.step_costs(_HLO) == (4 * 2, 4 * per_layer)
    # Where they go, by the model code each kernel came from, every pass counted.
    assert gpu_compile.source_bytes(_HLO) == {
        "fwd encoder/layer_#/read": 4 * (512 + 4 + 512),
        "bwd encoder/layer_#/tanh": 4 * (512 + 4 + 512),
    }


# One matmul's product f32[8,48] (1,536 bytes) holding three [8,16] products side by side:
# a kernel reading two of them through static slices of a bitcast, and one that reads the
# whole product beside a slice of it.
_SLICES = """HloModule sliced

%two_thirds (param_0: f32[8,48]) -> f32[8,16] {
  %param_0 = f32[8,48]{1,0} parameter(0)
  %view = f32[8,3,16]{2,1,0} bitcast(%param_0)
  %q = f32[8,1,16]{2,1,0} slice(%view), slice={[0:8], [0:1], [0:16]}
  %k = f32[8,1,16]{2,1,0} slice(%view), slice={[0:8], [1:2], [0:16]}
  %sum = f32[8,1,16]{2,1,0} add(%q, %k)
  ROOT %out = f32[8,16]{1,0} bitcast(%sum)
}

%whole (param_0: f32[8,48]) -> f32[8,48] {
  %param_0 = f32[8,48]{1,0} parameter(0)
  %head = f32[8,16]{1,0} slice(%param_0), slice={[0:8], [0:16]}
  %scale = f32[8,48]{1,0} exponential(%param_0)
  ROOT %out = f32[8,48]{1,0} copy(%scale)
}

ENTRY %main (y: f32[8,48]) -> (f32[8,16], f32[8,48]) {
  %y = f32[8,48]{1,0} parameter(0)
  %a = f32[8,16]{1,0} fusion(%y), kind=kLoop, calls=%two_thirds, metadata={op_name="jit(step)/jvp(model)/attention/slice"}
  %b = f32[8,48]{1,0} fusion(%y), kind=kLoop, calls=%whole, metadata={op_name="jit(step)/jvp(model)/attention/exp"}
  ROOT %out = (f32[8,16]{1,0}, f32[8,48]{1,0}) tuple(%a, %b)
}
"""  # noqa: E501 (an HLO instruction is one line)


def test_an_operand_read_only_through_slices_moves_the_slices() -> None:
    assert gpu_compile.source_bytes(_SLICES) == {
        # Two [8,16] slices of the product read (2 x 512), one [8,16] written (512).
        "fwd jvp(model)/attention/slice": 2 * 512 + 512,
        # The whole product read beside its slice: read in full (1,536), written (1,536).
        "fwd jvp(model)/attention/exp": 1536 + 1536,
    }


# A stacked product f32[8,3,16] (1,536 bytes) passed three times to a kernel that reads
# its slots through block specs, and a second kernel that writes into the first one's
# result (aliased) while reading the product (three times) and a f32[8,16] (512).
_KERNELS = """HloModule stacked

ENTRY %main (y: f32[8,3,16], g: f32[8,16]) -> f32[8,3,16] {
  %y = f32[8,3,16]{2,1,0} parameter(0)
  %g = f32[8,16]{1,0} parameter(1)
  %a = f32[8,3,16]{2,1,0} custom-call(%y, %y, %y, %g), custom_call_target="__gpu$xla.gpu.triton", api_version=API_VERSION_TYPED_FFI, metadata={op_name="jit(step)/transpose(jvp(model))/attention/dkv"}
  ROOT %b = f32[8,3,16]{2,1,0} custom-call(%y, %y, %y, %g, %a), custom_call_target="__gpu$xla.gpu.triton", output_to_operand_aliasing={{}: (4, {})}, api_version=API_VERSION_TYPED_FFI, metadata={op_name="jit(step)/transpose(jvp(model))/attention/dq"}
}
"""  # noqa: E501 (an HLO instruction is one line)


def test_a_kernel_reads_a_buffer_passed_several_times_once_and_not_the_one_it_writes_into() -> None:
    assert gpu_compile.source_bytes(_KERNELS) == {
        # The product read once (1,536) and g (512); the result written (1,536).
        "bwd transpose(jvp(model))/attention/dkv": 1536 + 512 + 1536,
        # The same reads; the aliased result not read, written (counted whole: 1,536).
        "bwd transpose(jvp(model))/attention/dq": 1536 + 512 + 1536,
    }
