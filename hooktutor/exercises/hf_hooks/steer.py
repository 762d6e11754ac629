"""12_huggingface_hooks, exercise: a steering hook that returns what the block returned, of the same
type: a bare tensor from a Llama decoder layer (transformers 5), a tuple from a T5 block.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: the forum snippet ``(output[0] + vector,) + output[1:]`` on a Llama decoder layer
  (on transformers 5 ``output`` is a tensor: ``output[0]`` is the first sequence, and the
  concatenation raises); ``output + vector`` on a T5 block's tuple (raises); only the hidden states
  returned where the block returns a tuple (T5 unpacks three values: raises); the vector added to
  the block's input with a pre-hook; only the last position steered;
- nested: blocks two and three levels down (``model.layers.1``, ``decoder.block.1``);
- technique: a list ``[output[0] + vector, *output[1:]]`` where a T5 block returned a tuple (T5's
  stack unpacks a list as well: only the type of what the hook returned shows it);
- alias: ``output += vector`` / ``output[0].add_(vector)`` in place: a hook registered before
  yours (transformers' own output capturing does this) keeps the block's output, and sees it change;
- dtype: a float64 model and vector;
- raises: the hook removed without ``finally:``;
- repeat: the same model steered twice, then once more without: no hook left, no stacking;
- left_as_found: a model in train mode switched to ``eval()`` and left so.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .. import kit
from ..core import CALLERS_HOOK_IDS, Exercise, Tester, learners_hooks
from ._shared import IDS, first, llama, t5


def steer(model, inputs, block, vector):
    """model(**inputs).logits with `vector` added to the hidden states that `block` returns."""
    ### BEGIN SOLUTION
    def add(module, args, output):
        if isinstance(output, tuple):  # a T5 block: (hidden_states, position biases...)
            return (output[0] + vector, *output[1:])
        return output + vector  # a Llama decoder layer (transformers 5): a bare tensor

    handle = block.register_forward_hook(add)
    try:
        return model(**inputs).logits
    finally:
        handle.remove()
    ### END SOLUTION


_TYPE = ("a Llama decoder layer returns a bare tensor (transformers 5) and a T5 block a tuple (hidden_states, "
         "position biases...): test isinstance(output, tuple), add the vector to output[0] and return "
         "(output[0] + vector, *output[1:]) for a tuple, output + vector for a tensor")

exercise = Exercise(
    "hf_hooks.steer", "Steer a Hugging Face block, whatever it returns",
    task=("write steer(model, inputs, block, vector) that runs model(**inputs) with a forward hook on `block` "
          "that adds `vector` (shape (hidden,)) to the block's hidden states at every position, as a new tensor "
          "(never in place: another hook may keep the block's output), and returns what the block returned, "
          "of the same type: a tensor where the block returns a tensor (a Llama decoder layer), a tuple with the "
          "hidden states first and the rest unchanged where it returns a tuple (a T5 block). Remove the hook "
          "(also when the model raises) and return the logits (model(**inputs).logits)"),
    hints=[
        "A forward hook that returns a value replaces the block's output; look at what the block returns "
        "first (section 1): a Llama decoder layer and a T5 block differ.",
        "isinstance(output, tuple) tells them apart. The hidden states are the tensor itself, or output[0].",
        "For a tuple: return (output[0] + vector, *output[1:]), so the position biases go on to the next "
        "block; for a tensor: return output + vector.",
    ],
    solution=steer,
    answer_name="steer",
    # T5 unpacks a block's output since transformers 5.15 and indexed it before ("index 2 is out of
    # bounds"): claim hf-t5-stack-unpacks-block-output
    errors={"can only concatenate tuple": _TYPE, "not enough values to unpack": _TYPE,
            "is out of bounds for dimension 0 with size": _TYPE, "object has no attribute 'dtype'": _TYPE},
    guide="""The forum snippet `(output[0] + vector,) + output[1:]` (on transformers 5 a Llama
    decoder layer returns a tensor: the concatenation raises, and an in-place
    `output[0] += vector` steers only the first sequence, silently); `output + vector` on a T5
    block's tuple; returning only the hidden states from a T5 block (it unpacks three values);
    a list where a T5 block returned a tuple (T5 unpacks it too: the check compares types);
    adding the vector in place (a hook registered before, such as transformers' own output
    capturing, keeps the block's output and sees it change); a pre-hook that steers the
    input; the hook removed without `finally:`.""",
)


class _ReturnedTypes:
    """Per call of ``block`` in the block: ``(type of what forward returned, type of what the model
    got after every hook)``. A forward hook put first sees forward's result; a pre-hook puts, at
    each call, a forward hook last (after the answer's), which sees what the model gets. The
    handles count as the caller's (``CALLERS_HOOK_IDS``), never as the learner's."""

    def __init__(self, block) -> None:
        self.block, self.types, self._handles = block, [], []

    def _keep(self, handle):
        CALLERS_HOOK_IDS.add(handle.id)
        self._handles.append(handle)
        return handle

    def __enter__(self) -> _ReturnedTypes:
        def returned(module, args, output):
            self.types.append([type(output), None])

        def put_last(module, args):
            def got(module, args, output):   # once: it goes when it has seen the call
                self.types[-1][1] = type(output)
                handle.remove()
            handle = self._keep(module.register_forward_hook(got))

        self._keep(self.block.register_forward_hook(returned, prepend=True))
        self._keep(self.block.register_forward_pre_hook(put_last))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
            CALLERS_HOOK_IDS.discard(handle.id)
        self._handles.clear()


def _add(vector: torch.Tensor) -> Callable:
    def add(module, args, output):
        return (output[0] + vector, *output[1:]) if isinstance(output, tuple) else output + vector
    return add


def _run(model, inputs: dict, block, hook: Callable | None = None, pre: bool = False) -> torch.Tensor:
    if hook is None:
        return model(**inputs).logits.detach()
    handle = block.register_forward_pre_hook(hook) if pre else block.register_forward_hook(hook)
    with handle:
        return model(**inputs).logits.detach()


def _steer_case(answer: Callable, t: Tester, model, inputs: dict, name: str, vector: torch.Tensor,
                *, train: bool = False) -> None:
    block = model.get_submodule(name)
    want = _run(model, inputs, block, _add(vector))
    mistakes = {
        "input": (_run(model, inputs, block, lambda m, a: (a[0] + vector, *a[1:]), pre=True),
                  "the vector was added to the block's input: add it to its output, in a forward hook"),
        "none": (_run(model, inputs, block), "the logits did not change: return the steered output from the hook"),
        "last": (_run(model, inputs, block, lambda m, a, o: _last(o, vector)), (
            "only the last position was steered: add the vector at every position (broadcasting a (hidden,) "
            "vector does it)")),
    }
    if train:
        model.train()
    t.track(model)
    with kit.LeftAsFound(t, model), kit.HookWitness({name: block}) as witness, _ReturnedTypes(block) as kinds:
        got = answer(model, inputs, block, vector.clone())
        again = answer(model, inputs, block, vector.clone())
    t.expect_type(got, torch.Tensor, what=f"steer(model, inputs, {name}, vector)", nudge="return the logits")
    changed = sorted({f"{before.__name__} -> {after.__name__}" for before, after in kinds.types if after is not before})
    t.expect(not changed, what=f"the type of what {name} handed on, after your hook", expected="the same type",
             got=", ".join(changed), nudge=(
                 "return the same type the block returned: a tuple where it returned a tuple (not a list), a "
                 "tensor where it returned a tensor"))
    # the same operations as the reference; 1e-5 is far below what a misplaced vector changes (1e-2 and more)
    t.expect_close(got, want, what=f"the logits, steered at {name}", wrong=mistakes,
                   nudge=f"add the vector to the hidden states {name} returns, at every position")
    t.expect(witness.fired(name, "forward") >= 1, what=f"a forward hook on {name} while the model ran",
             expected="one of yours", got="none", nudge="add the vector in a forward hook on the block")
    t.expect_close(again, want, what="the logits of a second call on the same model", nudge=(
        "the second call must steer once, like the first: remove your hook after each call"))
    t.expect(not learners_hooks(model), what="hooks left after your answer", expected="none",
             got=len(learners_hooks(model)), nudge="remove your hook in a finally: block")


def _last(output, vector):
    hidden = first(output).clone()
    hidden[:, -1] = hidden[:, -1] + vector
    return (hidden, *output[1:]) if isinstance(output, tuple) else hidden


@exercise.case("a tiny Llama steered at model.layers.1 (a decoder layer: a bare tensor)")
def _(answer, t: Tester) -> None:
    _steer_case(answer, t, llama(40), {"input_ids": IDS}, "model.layers.1", kit.randn(16, seed=40))


@exercise.case("a tiny T5 steered at decoder.block.1 (a tuple: hidden states, two position biases)")
def _(answer, t: Tester) -> None:
    inputs = {"input_ids": IDS, "decoder_input_ids": IDS[:, :3]}
    _steer_case(answer, t, t5(41), inputs, "decoder.block.1", kit.randn(16, seed=41))


@exercise.case("a model that raises halfway: the hook must go")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=42), "a model that raises halfway (after fc1)")
    kit.call_expecting_kit_error(answer, model, {"x": torch.zeros(2, 4)}, model.fc1, torch.ones(4))
    left = [r.path for r in learners_hooks(model)]
    t.expect(not left, what="hooks left on the model after it raised", expected="none", got=left, nudge=(
        "model(**inputs) raised, and your hook stayed attached: remove the handle in the `finally:` of a try: "
        "around the call"))


@exercise.case("a T5 encoder block (a tuple ending in None), float64", hidden=True)
def _(answer, t: Tester) -> None:
    inputs = {"input_ids": IDS, "decoder_input_ids": IDS[:, :2]}
    _steer_case(answer, t, t5(43, dtype=torch.float64), inputs, "encoder.block.0",
                kit.randn(16, seed=43).double())


@exercise.case("a Llama in train mode, steered at model.layers.0, and left as found", hidden=True)
def _(answer, t: Tester) -> None:
    _steer_case(answer, t, llama(44), {"input_ids": IDS[:1]}, "model.layers.0", kit.randn(16, seed=44),
                train=True)


@exercise.case("a hook registered before yours keeps the block's output (as transformers' output "
               "capturing does): it must not change", hidden=True)
def _(answer, t: Tester) -> None:
    for model, inputs, name in ((llama(45), {"input_ids": IDS}, "model.layers.0"),
                                (t5(45), {"input_ids": IDS, "decoder_input_ids": IDS[:, :3]}, "decoder.block.0")):
        block, kept = model.get_submodule(name), []
        with block.register_forward_hook(lambda m, a, o: kept.append((first(o), first(o).clone()))):
            t.track(model)
            got = answer(model, inputs, block, kit.randn(16, seed=46))
        t.expect_type(got, torch.Tensor, what=f"steer(model, inputs, {name}, vector)", nudge="return the logits")
        held, value = kept[-1]
        t.expect(torch.equal(held, value), what=f"the output of {name} that an earlier hook kept",
                 expected="unchanged", got="changed by your hook", nudge=(
                     "your hook added the vector in place, so the tensor the earlier hook kept changed too: return "
                     "a new tensor, output + vector (or (output[0] + vector, *output[1:]))"))


@exercise.wrong("the forum snippet (output[0] + vector,) + output[1:] on every block", mentions="bare tensor")
def _steer_forum(model, inputs, block, vector):
    with block.register_forward_hook(lambda m, a, o: (o[0] + vector,) + o[1:]):
        return model(**inputs).logits


@exercise.wrong("output + vector on every block, a T5 block's tuple too", mentions="isinstance(output, tuple)")
def _steer_plain(model, inputs, block, vector):
    with block.register_forward_hook(lambda m, a, o: o + vector):
        return model(**inputs).logits


@exercise.wrong("returns only the hidden states from a T5 block", mentions="(output[0] + vector, *output[1:])")
def _steer_first_only(model, inputs, block, vector):
    with block.register_forward_hook(lambda m, a, o: first(o) + vector):
        return model(**inputs).logits


@exercise.wrong("returns a list [output[0] + vector, *output[1:]] where a T5 block returned a tuple",
                mentions="not a list")
def _steer_list(model, inputs, block, vector):
    def add(m, a, o):
        return [o[0] + vector, *o[1:]] if isinstance(o, tuple) else o + vector
    with block.register_forward_hook(add):
        return model(**inputs).logits


@exercise.wrong("adds the vector to the input, in a pre-hook", mentions="block's input")
def _steer_pre(model, inputs, block, vector):
    with block.register_forward_pre_hook(lambda m, a: (a[0] + vector, *a[1:])):
        return model(**inputs).logits


@exercise.wrong("steers only the last position", mentions="every position")
def _steer_last(model, inputs, block, vector):
    with block.register_forward_hook(lambda m, a, o: _last(o, vector)):
        return model(**inputs).logits


@exercise.wrong("removes the hook after the call, not in finally:", mentions="finally:")
def _steer_no_finally(model, inputs, block, vector):
    handle = block.register_forward_hook(_add(vector))
    logits = model(**inputs).logits
    handle.remove()
    return logits


@exercise.wrong("adds the vector in place", mentions="in place", hidden=True)
def _steer_in_place(model, inputs, block, vector):
    def add(m, a, o):
        first(o).add_(vector)
        return o
    with block.register_forward_hook(add):
        return model(**inputs).logits


@exercise.wrong("switches the model to eval() and leaves it so", mentions="as you found it", hidden=True)
def _steer_eval(model, inputs, block, vector):
    model.eval()
    with block.register_forward_hook(_add(vector)):
        return model(**inputs).logits
