// core/ds/ds.h — umbrella of the data-structure layer (heap geometry and size
// classes, intrusive lists). Includes only the platform layer below it.
#pragma once

#include "core/ds/list.h"
#include "core/ds/size_class.h"
#include "core/platform/platform.h"
