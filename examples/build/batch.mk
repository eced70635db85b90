# Converts every models/*.onnx to out/*.tflite through one `qconvert batch`: one process for the
# lot instead of one per model (a small model's conversion is mostly the start-up of Python,
# onnx, onnxruntime and LiteRT). The loop lists the models whose .tflite is missing or older, one
# job per line, and the batch converts them; each job's lines name it (out/jobs.txt:LINE), a
# failed job does not stop the others, and make fails with the first failed job's exit code.
# Run: make -f batch.mk. qconvert must be on PATH.
QCONVERT ?= qconvert
MODELS := $(wildcard models/*.onnx)

all: $(MODELS)
	@mkdir -p out
	@for m in $(MODELS); do t=out/$$(basename "$$m" .onnx).tflite; \
	  if [ ! -f "$$t" ] || [ "$$m" -nt "$$t" ]; then echo "$$m $$t"; fi; done > out/jobs.txt
	@if [ -s out/jobs.txt ]; then $(QCONVERT) batch out/jobs.txt; fi

clean:
	rm -rf out

.PHONY: all clean
