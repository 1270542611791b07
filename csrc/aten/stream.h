// Streams and events of the tpu device, behind the DeviceGuardImpl (device.cc).
//
// PJRT gives a device one execution order, with programs ordered by the
// buffers they share, so every stream of a device runs on that order: stream
// ids are labels (0 the default, new ones numbered), each thread has a
// current stream per device, and waiting for an event or another stream is
// satisfied by ordering. An event captures everything launched so far (the
// thread's Fused recording is flushed first): it is complete when those
// programs have finished, and with timing on it notes when that happened.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/Stream.h>

namespace torch_tpu::aten::streams {

c10::Stream current(c10::Device device);
c10::Stream default_stream(c10::Device device);
c10::Stream create(c10::Device device);
// Makes `stream` its device's current stream on this thread; returns the old.
c10::Stream exchange(c10::Stream stream);

// Whether everything launched so far has finished (flushes this thread's
// recording first); synchronize waits for it.
bool query();
void synchronize();

// The DeviceGuardImpl's event half; `*event` is an EventState (created on
// first record, freed by destroy).
void record(void** event, const c10::Stream& stream, c10::EventFlag flag);
bool query(void* event);
void synchronize(void* event);
// Milliseconds from `start`'s completion to `end`'s (both recorded with
// timing and complete; c10::Event checks that).
double elapsed_ms(void* start, void* end);
void destroy(void* event) noexcept;

}  // namespace torch_tpu::aten::streams
