#include "worker/trainer/layout.h"

namespace dtrain::trainer {

worker::Result<ModelLayout> plan_model(const std::vector<int>& widths, int tensor, int pipeline) {
  ModelLayout layout;
  layout.widths = widths;
  layout.tensor = tensor;
  layout.pipeline = pipeline;
  int count = static_cast<int>(widths.size()) - 1;
  // Units a stage may not split: each pair, then the odd last layer on its own.
  std::vector<int> unit_begin;
  for (int l = 0; l < count; ++l) {
    bool paired = l % 2 == 0 ? l + 1 < count : true;
    Split split = !paired ? Split::kReplicated : (l % 2 == 0 ? Split::kColumn : Split::kRow);
    layout.layers.push_back({l, widths[l], widths[l + 1], split, l + 1 < count});
    if (l % 2 == 0) unit_begin.push_back(l);
  }
  int units = static_cast<int>(unit_begin.size());
  int hidden_layers = count - 1;
  if (tensor > 1) {
    if (count < 2) {
      return worker::Error{"dtrain-train: tensor parallelism " + std::to_string(tensor) +
                           " needs a hidden layer to split; use --layers 1 or more"};
    }
    for (const LinearLayer& layer : layout.layers) {
      int split_width = layer.split == Split::kColumn ? layer.out : layer.split == Split::kRow ? layer.in : 0;
      if (split_width % tensor != 0) {
        return worker::Error{"dtrain-train: tensor parallelism " + std::to_string(tensor) + " must divide --hidden " +
                             std::to_string(split_width) + "; choose --hidden as a multiple of " +
                             std::to_string(tensor)};
      }
    }
  }
  if (pipeline > units) {
    return worker::Error{"dtrain-train: pipeline parallelism " + std::to_string(pipeline) + " needs " +
                         std::to_string(pipeline) + " stages, but --layers " + std::to_string(hidden_layers) +
                         " makes " + std::to_string(units) +
                         " (stages take whole column+row pairs of linear layers); use --layers " +
                         std::to_string(2 * pipeline - 1) + " or more"};
  }
  for (int stage = 0; stage < pipeline; ++stage) {
    layout.stage_begin.push_back(unit_begin[static_cast<size_t>(stage * units / pipeline)]);
  }
  layout.stage_begin.push_back(count);
  return layout;
}

std::string ModelLayout::describe() const {
  std::string text;
  for (int stage = 0; stage < pipeline; ++stage) {
    int first = stage_begin[stage], last = stage_begin[stage + 1] - 1;
    text += (stage == 0 ? "" : ", ") + std::string("stage ") + std::to_string(stage) + ": layer" +
            (first == last ? " " + std::to_string(first) : "s " + std::to_string(first) + "-" + std::to_string(last));
  }
  return text;
}

}  // namespace dtrain::trainer
