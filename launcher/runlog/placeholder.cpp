namespace dtrain { int placeholder_runlog = 0; }
