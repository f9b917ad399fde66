namespace dtrain { int placeholder_plan = 0; }
