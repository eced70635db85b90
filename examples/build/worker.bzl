# A Bazel rule converting an ONNX model through qconvert's persistent worker: one qconvert process
# serves the conversions of a build instead of one process per model (documentation only: the
# tests have no Bazel; tests/cli/test_batch.py runs the worker protocol itself). Bazel starts
# `qconvert worker --persistent_worker` and sends each action's arguments as a flag file. Name a
# py_binary (or sh_binary) that runs qconvert as `qconvert`; on Bazel before 6 build with
# --experimental_worker_allow_json_protocol. Use: load("//:worker.bzl", "tflite") and
#   tflite(name = "model", src = "model.onnx")
#   tflite(name = "model_int8", src = "model.onnx", data = ["calibration.npz"],
#          flags = ["--quantize", "--calibration", "calibration.npz"])
def _tflite_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".tflite")
    args = ctx.actions.args()
    args.add(ctx.file.src)
    args.add(out)
    args.add_all(ctx.attr.flags)
    args.use_param_file("@%s", use_always = True)
    args.set_param_file_format("multiline")
    ctx.actions.run(
        executable = ctx.executable.qconvert,
        arguments = ["worker", args],
        inputs = [ctx.file.src] + ctx.files.data,
        outputs = [out],
        mnemonic = "QConvert",
        progress_message = "Converting %s" % ctx.file.src.short_path,
        execution_requirements = {"supports-workers": "1", "requires-worker-protocol": "json"},
    )
    return [DefaultInfo(files = depset([out]))]

tflite = rule(
    implementation = _tflite_impl,
    attrs = {
        "src": attr.label(allow_single_file = [".onnx"], mandatory = True),
        "data": attr.label_list(allow_files = True),
        "flags": attr.string_list(),
        "qconvert": attr.label(default = "//:qconvert", executable = True, cfg = "exec"),
    },
)
