#include "worker/device_discovery.h"

namespace trainyard::worker {

trainyard::v1::Device LiveFiguresOf(const DeviceReading& reading) {
  trainyard::v1::Device d;
  d.set_index(reading.index);
  d.set_memory_used_bytes(reading.memory_used_bytes.value_or(0));
  d.set_utilization_percent(reading.utilization_percent.value_or(0));
  d.set_temperature_celsius(reading.temperature_celsius.value_or(0));
  d.set_power_milliwatts(reading.power_milliwatts.value_or(0));
  return d;
}

}  // namespace trainyard::worker
