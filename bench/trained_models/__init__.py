"""The models of the trained-model table (bench/trained.py), grouped by structure.

Each module describes its models as common.Spec objects: ONNX files shipped inside PyPI wheels
(ocr.py: PaddleOCR's PP-OCRv4 from rapidocr-onnxruntime; yolox.py: ddddocr's YOLOX detector) and
small models trained here with torch on data made here (detector.py, and yolo_nms.py: it with
NMS appended; segmenter.py, crnn.py, classifier.py, transformer.py; hf_encoders.py: Hugging Face
transformers' BERT, ViT and Whisper encoder classes at toy size). common.py holds what they
share: the cache, the wheels, the task metrics; text.py and shapes.py draw the data.
"""

from . import classifier, crnn, detector, hf_encoders, ocr, segmenter, transformer, yolo_nms, yolox

_BY_NAME = {spec.name: spec for module in (detector, yolo_nms, yolox, ocr, crnn, transformer,
                                           hf_encoders, segmenter, classifier) for spec in module.SPECS}
# The table's order: detectors, recognizers, transformers, segmenters, classifiers.
ORDER = ["yolov8-shapes", "yolov8-shapes-nms", "yolov8-shapes-nms-agnostic", "yolox-chars",
         "ppocr-rec", "crnn-text", "vit-digits", "vit-digits-var", "bert-tokens", "vit-hf-digits",
         "whisper-tones", "ppocr-det", "unet-shapes", "mnv3-shapes", "ppocr-cls"]
SPECS = {name: _BY_NAME[name] for name in ORDER}
