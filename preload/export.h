// preload/export.h — marks the symbols libuslab.so exports; everything else is
// built with -fvisibility=hidden so internal calls bind locally.
#pragma once

#define USLAB_EXPORT __attribute__((visibility("default")))
