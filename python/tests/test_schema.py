"""Per-operator facts from the schema: reads, writes, fresh outputs, views, special kinds."""

import torch

from streamsan.torch import _schema
from streamsan.torch._schema import EMPTY, GENERIC, LIST, NOTHING, ONE, learn

aten = torch.ops.aten


def test_functional_op_reads_inputs_and_writes_its_fresh_output():
    f = learn(aten.add.Tensor)
    assert f.name == "aten::add.Tensor"
    assert f.kind == GENERIC
    assert f.inputs == ((0, "self", False, ONE), (1, "other", False, ONE))
    assert f.fresh == ((-1, "result", ONE),)


def test_out_variant_writes_the_out_argument_and_has_no_fresh_output():
    f = learn(aten.add.out)
    assert f.inputs == ((0, "self", False, ONE), (1, "other", False, ONE), (-1, "out", True, ONE))
    assert f.fresh == ()


def test_in_place_op_writes_self():
    f = learn(aten.add_.Tensor)
    assert f.inputs[0] == (0, "self", True, ONE)
    assert f.fresh == ()


def test_views_touch_nothing():
    for op in (aten.view.default, aten.slice.Tensor, aten.t.default, aten.transpose.int,
               aten.expand.default, aten.as_strided.default, aten.detach.default,
               aten.alias.default, aten.split.Tensor, aten._unsafe_view.default):
        assert learn(op).kind == NOTHING, op


def test_ops_without_a_kernel_touch_nothing():
    for op in (aten.is_pinned.default, aten.set_.source_Storage, aten.resize_.default,
               aten.unsqueeze_.default, aten.as_strided_.default):
        assert learn(op).kind == NOTHING, op
    assert learn(aten.empty.memory_format).kind == EMPTY
    assert learn(aten.empty_like.default).kind == EMPTY


def test_tensor_lists_are_read_element_by_element():
    f = learn(aten.cat.default)
    assert f.inputs == ((0, "tensors", False, LIST),)
    f = learn(aten.index.Tensor)
    assert f.inputs == ((0, "self", False, ONE), (1, "indices", False, LIST))
    f = learn(aten._foreach_add_.List)
    assert f.inputs == ((0, "self", True, LIST), (1, "other", False, LIST))


def test_several_fresh_outputs_are_numbered():
    f = learn(aten.var_mean.correction)
    assert f.fresh == ((0, "result0", ONE), (1, "result1", ONE))


def test_custom_op_mutates_args_come_from_its_schema():
    @torch.library.custom_op("streamsan_test::scale_into", mutates_args=("out",))
    def scale_into(x: torch.Tensor, out: torch.Tensor, k: float) -> None:
        out.copy_(x * k)

    f = learn(torch.ops.streamsan_test.scale_into.default)
    assert f.kind == GENERIC
    assert f.inputs == ((0, "x", False, ONE), (1, "out", True, ONE))
    assert f.fresh == ()


def test_facts_are_learned_once_per_overload(env):
    op = aten.mul.Tensor
    x = torch.ones(4)
    _schema.FACTS.pop(id(op), None)
    before = _schema.stats["learned"]
    for _ in range(5):
        x * x
    assert _schema.stats["learned"] == before + 1
    facts = _schema.facts_of(op)
    assert facts.op is op
    x * x
    assert _schema.facts_of(op) is facts
    assert _schema.stats["learned"] == before + 1
    assert [r["name"] for r in env.fake.of("launch")] == ["aten::ones"] + ["aten::mul.Tensor"] * 6
