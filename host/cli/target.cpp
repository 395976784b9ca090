#include "target.h"

#include "kthost/vm/qmp_client.h"

namespace kt::cli {

void target_options(Options& opt) { opt.value("vm", "FILE", "VM description written by the launcher (vm.json)"); }

Result<Target> open_target(const Options& opt) {
  auto vm_path = opt.get("vm");
  if (!vm_path) return Error(ErrorCode::InvalidArgument, "--vm FILE is required");
  Target t;
  KT_ASSIGN_OR_RETURN(t.vm, VmDescription::load(*vm_path));
  KT_ASSIGN_OR_RETURN(QmpClient qmp, QmpClient::connect(t.vm.qmp));
  t.monitor = std::make_unique<QmpClient>(std::move(qmp));
  t.label = *vm_path;
  return t;
}

}  // namespace kt::cli
