"""TFLite flatbuffer writing."""
